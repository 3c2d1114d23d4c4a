#!/usr/bin/env bash
# The GPU hand-off check (issue 13), for a machine with a CUDA device: `make test-gpu`.
# Arguments go to check.py (--batches, --json PATH, ...).
#
# With dist/gpu/ (`make gpu-bundle` on a build machine): nothing is built here. The abi3
# wheel is unpacked into out/gpu-site/ with Arrow's libraries beside it (as pyarrow's
# folder, where the extension's RPATH looks), and the machine's own Python, the one with
# the CUDA torch (HEADRACE_GPU_BASE_PYTHON, default python3), runs check.py with it on
# PYTHONPATH. Without dist/gpu/: .venv's Python and package (`make build`; its torch must
# be a CUDA build, see tests/gpu/README.md), or HEADRACE_GPU_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/../.."
shopt -s nullglob
wheels=(dist/gpu/headrace-*-abi3-*.whl)
if [ -z "${HEADRACE_GPU_PYTHON:-}" ] && ((${#wheels[@]} == 1)); then
  py=${HEADRACE_GPU_BASE_PYTHON:-python3}
  site=out/gpu-site
  rm -rf "$site"
  mkdir -p "$site"
  "$py" -m zipfile -e "${wheels[0]}" "$site"
  "$py" - "$site" dist/gpu/arrow-libs.tar.xz <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[2]) as t:  # pyarrow/libarrow.so.N, pyarrow/libparquet.so.N
    t.extractall(sys.argv[1], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
PY
  chmod +x "$site"/headrace/bin/headrace
  echo "check.sh: $(basename "${wheels[0]}") on $("$py" --version), unpacked in $site"
  PYTHONPATH=$PWD/$site${PYTHONPATH:+:$PYTHONPATH} exec "$py" tests/gpu/check.py "$@"
fi
exec "${HEADRACE_GPU_PYTHON:-.venv/bin/python}" tests/gpu/check.py "$@"
