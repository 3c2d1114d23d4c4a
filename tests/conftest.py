"""Fixtures for the end-to-end tests: the built `headrace` binary and sample datasets."""
import os
from pathlib import Path

import pytest

from e2e_util import REPO, run_headrace
# moto's S3 server, one per session for every module that uses it: moto reads its
# no-auth bootstrap count once per process, so a second server could not create its user.
from s3_fixtures import moto_s3  # noqa: F401  (fixture)


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
