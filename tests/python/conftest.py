"""Fixtures for the Python package's tests: a small dataset made through the binding, and
the real tokenizer vocabularies."""
import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

# Not importorskip: a missing package must fail the suite, not skip it (`make build`
# installs it into .venv).
import headrace


@pytest.fixture(scope="session")
def py_sample(tmp_path_factory) -> Path:
    """48 samples, shared by the tests that only read them."""
    out = tmp_path_factory.mktemp("py_sample")
    headrace.make_sample(str(out), samples=48, seed=5, threads=2)
    return out


@pytest.fixture
def make_pipeline(py_sample):
    """make_pipeline(**kw): small_pipeline over the shared dataset."""
    return lambda **kw: small_pipeline(py_sample, **kw)


def small_pipeline(dataset: Path, **kw):
    """decode -> resize 64 -> crop 56 -> normalize, tokenize 48: small and fast."""
    ops = headrace.ops
    extra_ops = kw.pop("extra_ops", [])
    kw.setdefault("batch_size", 8)
    kw.setdefault("seed", 1)
    kw.setdefault("cpu_threads", 2)
    kw.setdefault("memory_budget", "64MiB")
    return headrace.Pipeline(
        source=dataset / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=64), ops.center_crop(56), *extra_ops,
             ops.normalize(), ops.tokenize(dataset / "tokenizer.model", max_length=48)],
        **kw)


REPO = Path(__file__).resolve().parents[2]
VOCABS = REPO / "data" / "vocabs"
VOCAB_NAMES = ["qwen2", "llama3", "gpt2"]


def fetch_vocabs() -> Path:
    """data/vocabs (scripts/fetch_vocabs.py: Qwen2, Llama 3 and GPT-2's real tokenizer.json
    and the models' chat templates), fetched once when missing. `make test` runs the tests
    in two processes (pytest-xdist): one fetches, the other waits on the lock rather than
    writing the same files at once or finding them half written."""
    VOCABS.mkdir(parents=True, exist_ok=True)
    with open(VOCABS / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((VOCABS / n / "tokenizer.json").exists() for n in VOCAB_NAMES):
            subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_vocabs.py"),
                            "--out", str(VOCABS)], check=True)
    return VOCABS


def rest_of_epoch(it, each=lambda batch: batch):
    """each(batch) of the rest of the epoch a ``next(it)`` started, by next() until it
    ends (a ``for`` over a loader, or iter() on it, would start its next epoch)."""
    out = []
    while True:
        try:
            out.append(each(next(it)))
        except StopIteration:
            return out
