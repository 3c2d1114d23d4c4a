"""Fixtures for the end-to-end tests: the built `headrace` binary and sample datasets."""
import os
from pathlib import Path

import pytest

from e2e_util import REPO, run_headrace


@pytest.fixture(scope="session")
def headrace_bin() -> Path:
    path = Path(os.environ.get("HEADRACE_BIN", REPO / "build" / "headrace"))
    if not path.exists():
        pytest.fail(f"{path} does not exist: run `make build` first")
    return path


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory, headrace_bin) -> Path:
    """A small generated chat-VQA dataset, shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("sample")
    run_headrace(headrace_bin, "make-sample", "--out", out, "--samples", 48, "--seed", 5)
    return out
