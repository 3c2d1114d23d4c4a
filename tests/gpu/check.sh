#!/usr/bin/env bash
# The GPU hand-off check (issue 13), for a machine with a CUDA device: `make test-gpu`.
# Uses .venv's Python (its torch must be a CUDA build: see tests/gpu/README.md), or
# HEADRACE_GPU_PYTHON. Arguments go to check.py (--batches, --json PATH, ...).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${HEADRACE_GPU_PYTHON:-.venv/bin/python}" tests/gpu/check.py "$@"
