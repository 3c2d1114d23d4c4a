"""A real PyTorch training loop through Headrace, checkpointed and resumed in a new process."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import torch  # noqa: F401  (a missing torch fails here: it is a test dependency)

SCRIPT = Path(__file__).with_name("vlm_train.py")


def train(*args):
    proc = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


def test_tiny_vlm_trains_and_resumes_exactly_in_a_new_process(py_sample, tmp_path):
    full, resumed, ckpt = tmp_path / "full.json", tmp_path / "resumed.json", tmp_path / "ckpt.pt"
    # 48 samples, batch 8: 6 steps per epoch, 4 epochs, one `for` each. Step 9 is
    # mid-epoch 1, and the loader had batches prefetched beyond it that the trainer never
    # took; the resumed process finishes epoch 1, then runs epochs 2 and 3.
    train(py_sample, full, "--checkpoint-at", 9, "--checkpoint", ckpt)
    train(py_sample, resumed, "--resume", ckpt)
    full_run = json.loads(full.read_text())["steps"]
    after = json.loads(resumed.read_text())
    assert len(full_run) == 24 and after["start_step"] == 9
    # One `for` per epoch: 6 steps each, and each epoch its own order.
    assert [s["epoch"] for s in full_run] == [e for e in range(4) for _ in range(6)]
    orders = [tuple(s["digest"] for s in full_run[e * 6:(e + 1) * 6]) for e in range(4)]
    assert len(set(orders)) == 4
    losses = [s["loss"] for s in full_run]
    assert sum(losses[-6:]) / 6 < 0.8 * sum(losses[:6]) / 6, losses
    # The batches seen after the restart are those of the uninterrupted run.
    assert [s["digest"] for s in after["steps"]] == [s["digest"] for s in full_run[9:]]
    assert [s["epoch"] for s in after["steps"]] == [s["epoch"] for s in full_run[9:]]
    # And, model and optimizer restored too, training continues identically.
    for a, b in zip(after["steps"], full_run[9:]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-5)
