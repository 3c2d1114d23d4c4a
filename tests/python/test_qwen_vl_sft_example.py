"""The README's five-minute Qwen-VL path, as a newcomer types it (issue 47):
make-sample's VLM mix (0 to 4 images a conversation, text-only ones among them) ->
examples/qwen2_vl.yaml -> examples/qwen_vl_sft.py (headrace.hf.HeadraceTrainer on a small
Qwen2-VL): it trains, every batch checked against the model at the first one, and no
sample is lost."""
import re
import subprocess
import sys
from pathlib import Path

import headrace
from conftest import fetch_vocabs

REPO = Path(__file__).resolve().parents[2]

fetch_vocabs()


def test_the_five_minute_path_trains_on_make_sample_vlm_data(tmp_path):
    data = tmp_path / "vlm"
    headrace.make_sample(str(data), samples=24, seed=3, mix="vlm")
    run = subprocess.run(
        [sys.executable, str(REPO / "examples/qwen_vl_sft.py"), "--data",
         str(data / "manifest.jsonl"), "--max-steps", "2", "--out", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = re.search(r"trained (\d+) steps, mean loss ([\d.]+); .* (\d+) samples lost",
                     run.stdout)
    assert line, run.stdout[-2000:]
    assert int(line.group(1)) == 2
    assert 5.0 < float(line.group(2)) < 20.0  # ln(151936) = 11.9 for random weights
    assert int(line.group(3)) == 0
