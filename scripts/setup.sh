#!/usr/bin/env bash
# Installs what Headrace needs on a fresh Debian 12 machine: the Debian packages of the
# C++ libraries and build tools, and a Python virtual environment inside the repo for
# the test and benchmark harnesses. Fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  g++ make cmake ninja-build pkg-config ccache
  clang libclang-rt-14-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libexif-dev libyuv-dev
  libsentencepiece-dev libsimdjson-dev libyaml-cpp-dev libarchive-dev
  libpcre2-dev libutf8proc-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libcurl4-openssl-dev libssl-dev openssl libcpp-httplib-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev ffmpeg
  libtesseract-dev tesseract-ocr tesseract-ocr-eng libfreetype-dev fonts-dejavu-core
  liblzf-dev
  espeak-ng
  python3 python3-venv
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The repo's virtual environment. Re-installed when requirements change.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  # Debian's python3 needs python3-venv; a pyenv python has venv built in.
  "$PY" -m venv .venv
fi
if ! cmp -s requirements-dev.txt .venv/.requirements-installed 2>/dev/null; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  cp requirements-dev.txt .venv/.requirements-installed
fi
