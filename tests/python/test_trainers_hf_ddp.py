"""headrace.hf under DDP: 2 CPU ranks (gloo, torchrun's environment), each rank training on the
batches Headrace assigns it, checkpointing its own loader state and resuming from it
(tests/python/hf_ddp_train.py drives examples/hf_trainer.py)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_under_ddp_each_rank_trains_on_headraces_split_and_resumes_its_own(py_sample,
                                                                              tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "python" / "hf_ddp_train.py"), str(py_sample),
         str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    # A crashed rank's native and Python stacks fit in the message.
    assert proc.returncode == 0, proc.stderr[-16000:]
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, run in enumerate(runs):
        # The batches a plain headrace.Loader gives this rank: accelerate split nothing again.
        assert run["full"] == run["loader"] and len(run["full"]) == 9
        assert run["resumed"] == run["full"][2:]
        assert (tmp_path / "full" / "checkpoint-2" / f"headrace_loader_rank{rank}.json").exists()
    for epoch in range(3):  # the two ranks split each epoch: disjoint, all 48 samples
        samples = [i for run in runs for batch in run["full"][epoch * 3:(epoch + 1) * 3]
                   for i in batch]
        assert sorted(samples) == list(range(48))
