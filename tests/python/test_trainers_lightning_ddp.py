"""headrace.lightning under DDP: 2 CPU ranks (gloo, torchrun's environment), each rank
fitting on the batches Headrace assigns it and resuming from a mid-epoch checkpoint
(tests/python/lightning_ddp_fit.py drives examples/lightning_module.py)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_under_ddp_each_rank_fits_on_headraces_split_and_resumes_exactly(py_sample, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "python" / "lightning_ddp_fit.py"), str(py_sample),
         str(tmp_path)], capture_output=True, text=True, timeout=300)
    # A crashed rank's native and Python stacks fit in the message.
    assert proc.returncode == 0, proc.stderr[-16000:]
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for run in runs:
        # The batches a plain headrace.Loader gives this rank: no DistributedSampler.
        assert run["full"] == run["loader"] and len(run["full"]) == 9
        assert run["resumed"] == run["full"][2:]
    for epoch in range(3):  # the two ranks split each epoch: disjoint, all 48 samples
        samples = [i for run in runs for batch in run["full"][epoch * 3:(epoch + 1) * 3]
                   for i in batch]
        assert sorted(samples) == list(range(48))
