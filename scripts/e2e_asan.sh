#!/usr/bin/env bash
# The end-to-end suite against ASan + UBSan builds: the CLI (build-asan/headrace, `make
# asan`) and the Python extension (built here in build-asan from the objects `make asan`
# made, ~2 minutes; the build's HEADRACE_PYTHON is set back to OFF after), loaded into
# .venv's Python with the sanitizer runtimes preloaded. A diagnostic,
# not part of `make test` (it takes ~3x the plain suite): make test runs the C++ units
# under ASan, this runs the bindings and every CLI path the e2e tests drive.
#
#   scripts/e2e_asan.sh [pytest args]      # default: tests/ but Ray's
#
# Reports go to out/asan/asan.PID (an error stops its process: halt_on_error). Known
# differences from the plain suite: the RSS bounds some tests assert do not hold under
# ASan's shadow memory; programs the tests start (espeak-ng for make-sample's speech)
# inherit the preload and may hang: skip those tests or run them with the plain build.
# The first run (2026-12-06) found a UBSan error in SizeIndex::Read (a memcpy of 0 bytes
# into a null data()), which the C++ units had not reached.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
[ -x build-asan/headrace ] || { echo "e2e_asan: run \`make asan\` first" >&2; exit 1; }
trap 'cmake -S . -B build-asan -DHEADRACE_PYTHON=OFF > /dev/null' EXIT
cmake -S . -B build-asan -DHEADRACE_PYTHON=ON -DPython_EXECUTABLE="$PY" > /dev/null
cmake --build build-asan -j "${JOBS:-2}" --target _headrace
site=$ROOT/out/asan/site
rm -rf "$site" && mkdir -p "$site" "$ROOT/out/asan"
cp -r python/headrace "$site/"
cp build-asan/python/_headrace*.so "$site/headrace/"
mkdir -p "$site/headrace/bin" && ln -sf "$ROOT/build-asan/headrace" "$site/headrace/bin/headrace"
runtimes="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
[ $# -gt 0 ] || set -- tests --ignore=tests/python/test_ray.py
PYTHONPATH=$site LD_PRELOAD=$runtimes HEADRACE_BIN=$ROOT/build-asan/headrace \
  ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:log_path=$ROOT/out/asan/asan \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$PY" -m pytest -q -p no:cacheprovider -n "${JOBS:-2}" --dist loadfile "$@"
