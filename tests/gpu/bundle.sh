#!/usr/bin/env bash
# `make gpu-bundle`: what tests/gpu/check.sh needs on a GPU machine that has Python 3.12
# and a CUDA torch but no network and none of our libraries, in dist/gpu/ (git-ignored):
#   headrace-<v>-cp312-abi3-manylinux_*.whl   the wheel `make wheel` built (3.12+)
#   arrow-libs.tar.xz                         pyarrow's libarrow/libparquet, which the
#                                             extension links (the wheel depends on
#                                             pyarrow; its 55 MB wheel would not fit)
# Together under 60 MiB: that machine receives at most 64 MiB per call, this tree's
# tracked files included. Send it with the device tool's carry=["dist/gpu"].
set -euo pipefail
cd "$(dirname "$0")/../.."
shopt -s nullglob
wheels=(dist/headrace-*-cp312-abi3-manylinux_*_x86_64.whl)
((${#wheels[@]} == 1)) || { echo "gpu-bundle: expected one abi3 wheel in dist/ (make wheel)" >&2; exit 1; }
# The pyarrow the abi3 module was linked against (scripts/build_wheel.sh's 3.12 environment).
pyarrow=$(.whl/venv-cp312/bin/python -c "import pyarrow; print(pyarrow.get_library_dirs()[0])")
rm -rf dist/gpu
mkdir -p dist/gpu
cp "${wheels[0]}" dist/gpu/
libs=$(cd "$pyarrow" && ls libarrow.so.[0-9]* libparquet.so.[0-9]*)
tar -C "$pyarrow/.." -cf - $(for l in $libs; do echo "pyarrow/$l"; done) | nice -n 19 xz -6 -T2 > dist/gpu/arrow-libs.tar.xz
bytes=$(du -cb dist/gpu/* | tail -1 | cut -f1)
ls -l dist/gpu
echo "gpu-bundle: dist/gpu is $((bytes / 1048576)) MiB"
((bytes < 60 * 1048576)) || { echo "gpu-bundle: over 60 MiB" >&2; exit 1; }
