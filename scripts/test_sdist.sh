#!/usr/bin/env bash
# `make test-sdist`: the sdist builds and runs. Builds it with the build backend's PEP 517
# hook (as `python -m build --sdist` does), then a wheel from the unpacked sdist alone (no
# file of this tree: a fresh folder, its own build-py/), with .venv's build requirements
# (scikit-build-core, nanobind, pyarrow's headers), installs it in a fresh environment
# (its dependencies from PyPI) and runs it there: a sample dataset made and loaded
# through the Python Loader. ~10 minutes on 2 cores (the
# C++ core compiles again: ccache keys on the folder's depth). Not in `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$PWD/.venv/bin/python}
work=$(mktemp -d /tmp/headrace-sdist.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PY" -c "import sys; from scikit_build_core.build import build_sdist; build_sdist(sys.argv[1])" \
  "$work" > /dev/null
sdist=$(ls "$work"/headrace-*.tar.gz)
echo "test-sdist: $(basename "$sdist"), $(du -h "$sdist" | cut -f1)"
tar -C "$work" -xzf "$sdist"
src=$(ls -d "$work"/headrace-*/)
# ccache on relative paths: a rerun (another temporary folder, the same depth) hits it.
export CCACHE_BASEDIR=$src
(cd "$src" && nice -n 19 "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$work/wheel" \
  -C build.tool-args=-j"${JOBS:-2}" .)
wheel=$(ls "$work"/wheel/headrace-*.whl)
echo "test-sdist: built $(basename "$wheel")"
# Installed as a user installs it: a fresh environment, numpy and pyarrow from PyPI.
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel"
cd "$work" && "$work/venv/bin/python" - <<'PY'
import pathlib, sys
import headrace
assert pathlib.Path(headrace.__file__).is_relative_to(sys.prefix), headrace.__file__
headrace.make_sample("data", samples=16, seed=1, threads=2)
ops = headrace.ops
pipeline = headrace.Pipeline(source="data/manifest.jsonl", batch_size=4, seed=1,
                             ops=[ops.decode(), ops.resize(shorter_side=32),
                                  ops.center_crop(32), ops.normalize()])
with headrace.Loader(pipeline) as loader:
    batches = list(loader)
assert len(batches) == 4 and all(len(b["index"]) == 4 for b in batches), batches
# The same samples from Parquet: read through the Arrow bridge the sdist's build made for
# its pyarrow (src/headrace/formats/arrow_bridge/), beside the pyarrow pip installed.
import json
import pyarrow as pa, pyarrow.parquet as pq
rows = [json.loads(line) for line in open("data/manifest.jsonl")]
pq.write_table(pa.table({
    "id": [r["id"] for r in rows],
    "image": pa.array([open(f"data/{r['image']}", "rb").read() for r in rows], pa.binary()),
    "conversations": [json.dumps(r["conversations"]) for r in rows]}), "data/all.parquet")
parquet = headrace.Pipeline(source={"parquet": "data/all.parquet"}, batch_size=4, seed=1,
                            ops=[ops.decode(), ops.resize(shorter_side=32),
                                 ops.center_crop(32), ops.normalize()])
with headrace.Loader(parquet) as loader:
    assert sum(len(b["index"]) for b in loader) == 16
print(f"test-sdist: {len(batches)} batches from the sdist's wheel ({headrace.__file__}), "
      f"and the same samples from Parquet beside pyarrow {pa.__version__}")
PY
