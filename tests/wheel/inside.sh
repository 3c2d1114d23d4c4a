#!/usr/bin/env bash
# Runs inside tests/wheel/run.sh's root file system (Debian 12 or 11 minbase + python3,
# python3-venv): installs the wheel into a fresh venv and runs what a user would. The venv
# is python3's, or that of the interpreter named in /work/python311 (Debian 11's root,
# whose python3 is 3.9); /work/python312 names the abi3 wheel's (3.12 or later).
set -euo pipefail
cd /work
say() { echo "test-wheel [inside]: $*"; }

# None of the libraries the wheel vendors is here (PCRE2 and zlib are: grep and dpkg,
# essential packages, bring them; the wheel vendors its own PCRE2 all the same).
for lib in libavcodec.so.59 libtesseract.so.5 liblept.so.5 libturbojpeg.so.0 libwebp.so.7 \
           libsentencepiece.so.0 libcurl.so.4 libarchive.so.13 libyaml-cpp.so.0.7 \
           libsimdjson.so.14 libx264.so.164 libtesseract.so.4 libwebp.so.6 libyaml-cpp.so.0.6 \
           libopenh264.so.7; do
  if ldconfig -p | grep -q "$lib"; then say "the root file system has $lib"; exit 1; fi
done
python=$(cat python311 2>/dev/null || echo python3)
say "$(. /etc/os-release; echo "$PRETTY_NAME"), $($python --version), $(ldd --version | head -1)"

"$python" -m venv /opt/venv
/opt/venv/bin/pip install -q --disable-pip-version-check wheels/headrace-*-cp311-*.whl
if ls wheels/torch-*.whl >/dev/null 2>&1; then
  /opt/venv/bin/pip install -q --disable-pip-version-check wheels/torch-*.whl
fi
export PATH=/opt/venv/bin:$PATH
say "installed: $(pip list --format=freeze 2>/dev/null | grep -iE '^(headrace|numpy|pyarrow|torch)=' | tr '\n' ' ')"
command -v headrace

# The licences travel with it (scripts/wheel_fixup.py): Apache-2.0 in the metadata, the
# project's LICENSE and a notice and copyright file for every vendored library.
python - <<'PY'
import importlib.metadata as md, pathlib
dist = md.distribution("headrace")
assert dist.metadata["License-Expression"] == "Apache-2.0", dist.metadata["License-Expression"]
licences = pathlib.Path(dist.locate_file(f"headrace-{dist.version}.dist-info/licenses"))
notices = (licences / "THIRD_PARTY_NOTICES.md").read_text()
libs = sorted(p.name for p in (licences.parents[1] / "headrace.libs").iterdir())
missing = [name for name in libs if f"headrace.libs/{name} |" not in notices]
assert not missing, missing
assert not any("x264" in name for name in libs), libs
assert "Apache License" in (licences / "LICENSE").read_text()[:200]
# PEP 639: METADATA lists every file of the licenses folder, as a path inside it.
listed = sorted(dist.metadata.get_all("License-File"))
held = sorted(p.relative_to(licences).as_posix() for p in licences.rglob("*") if p.is_file())
assert listed == held, (listed, held)
print(f"test-wheel [inside]: Apache-2.0; {len(libs)} vendored libraries, each in the notices")
PY

# Every ELF file of the package resolves each library inside the wheel or pyarrow.
python - <<'PY'
import pathlib, subprocess, headrace
pkg = pathlib.Path(headrace.__file__).parent
files = [*pkg.glob("_headrace*.so"), pkg / "bin" / "headrace", *(pkg.parent / "headrace.libs").iterdir()]
for f in files:
    out = subprocess.run(["ldd", str(f)], capture_output=True, text=True, check=True).stdout
    bad = [l.strip() for l in out.splitlines() if "not found" in l]
    assert not bad, (f, bad)
print(f"test-wheel [inside]: {len(files)} ELF files, every library found")
PY

headrace make-sample --out data/sample --samples 200 --threads 2
headrace make-sample --out data/multimodal --samples 48 --threads 2 --modalities video,audio,ocr
check() {  # REPORT MIN_SAMPLES: the run delivered at least that many samples, no errors
  python - "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["samples"] >= int(sys.argv[2]) and r["errors"]["total"] == 0, (r["samples"], r["errors"])
print(f"test-wheel [inside]: {sys.argv[1]}: {r['samples']} samples, {r['samples_per_s']:.0f}/s, no errors")
PY
}
mkdir -p out
headrace run examples/vqa.yaml --quiet --report out/vqa.json --set trainer.step_ms=0
check out/vqa.json 400
if [ -f data/vocabs/qwen2/tokenizer.json ]; then  # (run.sh copies it in where it has one)
  headrace run examples/qwen2_vl.yaml --quiet --report out/qwen2_vl.json --set trainer.step_ms=0
  check out/qwen2_vl.json 200
else
  say "no data/vocabs/qwen2/tokenizer.json (scripts/fetch_vocabs.py): the VLM example is skipped"
fi
for example in video audio ocr; do
  headrace run "examples/$example.yaml" --quiet --report "out/$example.json"
  check "out/$example.json" 48
done
# Exit codes pass through the launcher: a configuration error is 2.
set +e; headrace run examples/no-such.yaml --quiet 2>/dev/null; rc=$?; set -e
[ "$rc" = 2 ] || { say "a missing config exited $rc, not 2"; exit 1; }

python loader_check.py

# Parquet through whichever pyarrow is installed (the engine's Arrow bridge for its
# release, src/headrace/formats/arrow_bridge/README.md): the newest and the oldest of the
# range the wheels have bridges for (scripts/build_wheel.sh, ARROW_BRIDGE_PYARROWS), and
# none at all, where everything but a Parquet source works and that says what to install.
OLDEST_PYARROW=15.0.2
NEWEST_PYARROW=26.0.1
pip_q() { "$1" -m pip install -q --disable-pip-version-check "${@:2}"; }
pip_q python "pyarrow==$NEWEST_PYARROW"
python parquet_check.py "$NEWEST_PYARROW"
pip uninstall -q -y pyarrow
headrace run examples/vqa.yaml --quiet --report out/no-pyarrow.json --set trainer.step_ms=0
check out/no-pyarrow.json 400
set +e
err=$(headrace run examples/vqa.yaml --quiet --set source.manifest= \
        --set "source.parquet=out/parquet-$NEWEST_PYARROW/part-{00000..00001}.parquet" 2>&1)
rc=$?
set -e
[ "$rc" != 0 ] && grep -q "no pyarrow found" <<< "$err" && grep -q "pip install 'pyarrow>=15'" <<< "$err" || {
  say "a Parquet source without pyarrow: exit $rc, $err"; exit 1; }
say "without pyarrow: the manifest pipeline runs, a Parquet source says: ${err##*: }"
pip_q python "pyarrow==$OLDEST_PYARROW"
python parquet_check.py "$OLDEST_PYARROW"

if [ -f python312 ]; then
  py=$(cat python312)
  "$py" -m venv /opt/venv312
  pip_q /opt/venv312/bin/python wheels/headrace-*-abi3-*.whl
  /opt/venv312/bin/python loader_check.py
  PATH=/opt/venv312/bin:$PATH /opt/venv312/bin/python parquet_check.py \
    "$(/opt/venv312/bin/python -c 'import pyarrow; print(pyarrow.__version__)')"
fi
if [ -f python310 ]; then  # the cp310 wheel: pyarrow 26 has no 3.10 wheel, 25 is the newest
  py=$(cat python310)
  "$py" -m venv /opt/venv310
  pip_q /opt/venv310/bin/python wheels/headrace-*-cp310-*.whl "pyarrow==$OLDEST_PYARROW"
  PATH=/opt/venv310/bin:$PATH /opt/venv310/bin/python loader_check.py
  PATH=/opt/venv310/bin:$PATH /opt/venv310/bin/python parquet_check.py "$OLDEST_PYARROW"
  pip_q /opt/venv310/bin/python pyarrow==25.0.1
  PATH=/opt/venv310/bin:$PATH /opt/venv310/bin/python parquet_check.py 25.0.1
fi
say "all passed"
