#!/usr/bin/env bash
# `make test-wheel`: the wheels of `make wheel` installed where none of our build
# dependencies are: a Debian 12 root file system made by debootstrap (variant minbase,
# plus python3 and python3-venv only), entered with chroot in a private mount namespace.
# There, in a fresh virtual environment, pip installs the cp311 wheel (numpy and pyarrow
# come from PyPI) and torch, and tests/wheel/inside.sh runs the command line (make-sample,
# the VQA, video, audio and OCR examples) and the Python Loader into torch. With a
# CPython 3.12 at hand (PY312, or pyenv's), the abi3 wheel is checked the same way in a
# second environment of that Python copied in (no torch there: numpy + DLPack); with a
# CPython 3.10 (PY310, or pyenv's), the cp310 wheel too. Parquet is read beside the oldest
# and the newest pyarrow the wheels have Arrow bridges for, and without pyarrow
# (tests/wheel/parquet_check.py).
#
# `tests/wheel/run.sh bullseye`: the same in Debian 11 (glibc 2.31), for the wheels of
# `make wheel-manylinux` (manylinux_2_31). Its python3 is 3.9, so the cp311 wheel runs on
# a CPython 3.11 built against Debian 11 (tests/wheel/python_bullseye.sh) and copied in;
# python3 stays, for the libraries (OpenSSL 1.1, libffi, ...) that CPython uses. The abi3
# wheel runs there on a CPython 3.13 built the same way (Debian packages no 3.12 source).
#
# Cached in .whl/ (git-ignored): the root file system as a tarball (made once, ~2 min),
# and pip's download cache. Each run unpacks a fresh tree, so nothing of a previous run
# is seen. Needs root (debootstrap, chroot, mount), as CI has.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE=$ROOT/.whl
SUITE=${1:-bookworm}
INCLUDE=python3,python3-venv
TARBALL=$CACHE/rootfs-$SUITE-minbase.tar
CHROOT=$CACHE/chroot-$SUITE

die() { echo "test-wheel: $*" >&2; exit 1; }
case $SUITE in bookworm|bullseye) ;; *) die "SUITE is bookworm or bullseye, not $SUITE" ;; esac
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mount)"
shopt -s nullglob
wheels=(dist/headrace-*-cp311-cp311-manylinux_*_x86_64.whl)
abi3=(dist/headrace-*-cp312-abi3-manylinux_*_x86_64.whl)
((${#wheels[@]} == 1)) || die "expected one cp311 wheel in dist/, found ${#wheels[@]}: run \`make wheel\`"
if [ "$SUITE" = bullseye ]; then
  glibc=$(basename "${wheels[0]}" | sed -E 's/.*manylinux_2_([0-9]+)_x86_64.whl/\1/')
  ((glibc <= 31)) || die "${wheels[0]} needs glibc 2.$glibc, Debian 11 has 2.31: run \`make wheel-manylinux\`"
  python311=$(tests/wheel/python_bullseye.sh 3.11)
  ((${#abi3[@]} == 0)) || python313=$(tests/wheel/python_bullseye.sh 3.13)
fi

if [ ! -f "$TARBALL" ] || [ "$(cat "$TARBALL.include" 2>/dev/null)" != "$INCLUDE" ]; then
  command -v debootstrap >/dev/null || {
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; }
  echo "test-wheel: debootstrap $SUITE (minbase + $INCLUDE) into $TARBALL"
  rm -rf "$CACHE/rootfs-build"
  debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$CACHE/rootfs-build" \
    http://deb.debian.org/debian > "$CACHE/debootstrap.log" 2>&1 || {
    tail -20 "$CACHE/debootstrap.log"; die "debootstrap failed"; }
  rm -f "$CACHE"/rootfs-build/var/cache/apt/archives/*.deb
  tar -C "$CACHE/rootfs-build" -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
  echo "$INCLUDE" > "$TARBALL.include"
  rm -rf "$CACHE/rootfs-build"
fi

rm -rf "$CHROOT"
mkdir -p "$CHROOT" "$CACHE/pip-cache"
tar -C "$CHROOT" -xf "$TARBALL"
mkdir -p "$CHROOT/work/wheels" "$CHROOT/root/.cache/pip"
cp -r examples "$CHROOT/work/"
cp tests/wheel/inside.sh tests/wheel/loader_check.py tests/wheel/parquet_check.py "$CHROOT/work/"
# Qwen2's tokenizer (scripts/fetch_vocabs.py writes it), where it has been fetched: the
# VLM example (examples/qwen2_vl.yaml) runs too.
if [ -f data/vocabs/qwen2/tokenizer.json ]; then
  mkdir -p "$CHROOT/work/data/vocabs/qwen2"
  cp data/vocabs/qwen2/tokenizer.json "$CHROOT/work/data/vocabs/qwen2/"
fi
cp "${wheels[0]}" "$CHROOT/work/wheels/"
if [ "$SUITE" = bullseye ]; then
  tar -C "$CHROOT" -xf "$python311"
  echo /opt/python3.11/bin/python3.11 > "$CHROOT/work/python311"
fi
# pip reaches PyPI from inside as it does here: the host's resolver and CA bundle (where
# this machine's TLS passes a proxy with a CA of its own; minbase has no CA bundle).
cp /etc/resolv.conf "$CHROOT/etc/resolv.conf"
CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
mkdir -p "$CHROOT/etc/ssl/certs"
[ -f "$CA" ] && cp "$CA" "$CHROOT/etc/ssl/certs/host-ca.crt"
# torch: PyPI's Linux wheel is the CUDA build (GBs with its nvidia-* wheels); the CPU
# build lies on this machine's image (pip's find-links, /opt/wheels). Without it the
# Python check uses numpy + DLPack, and says so.
torch=(${TORCH_WHEEL:-/opt/wheels/torch-*+cpu-cp311-cp311-*.whl})
((${#torch[@]})) && cp "${torch[0]}" "$CHROOT/work/wheels/"
# The abi3 wheel with a CPython 3.12 copied in at its own path (it links only libc and
# libm besides its own libpython; its stdlib's modules use libraries python3 brought).
py312=${PY312:-$(PYENV_VERSION=$(pyenv versions --bare 2>/dev/null | grep '^3\.12\.' | tail -1) \
                 pyenv which python3.12 2>/dev/null || true)}
# copy_python PYTHON WHEEL NAME: the CPython of PYTHON (its whole prefix) into the root,
# WHEEL beside the others, and the interpreter's path in /work/NAME for inside.sh.
copy_python() {
  local prefix
  prefix=$(dirname "$(dirname "$(readlink -f "$1")")")
  mkdir -p "$CHROOT$prefix"
  tar -C "$prefix" --exclude='test' --exclude='__pycache__' -cf - . | tar -C "$CHROOT$prefix" -xf -
  cp "$2" "$CHROOT/work/wheels/"
  echo "$prefix/bin/$(basename "$(readlink -f "$1")")" > "$CHROOT/work/$3"
}
if [ "$SUITE" = bullseye ] && ((${#abi3[@]} == 1)); then
  tar -C "$CHROOT" -xf "$python313"
  cp "${abi3[0]}" "$CHROOT/work/wheels/"
  echo /opt/python3.13/bin/python3.13 > "$CHROOT/work/python312"  # (the abi3 wheel's: 3.12+)
elif [ "$SUITE" = bookworm ] && ((${#abi3[@]} == 1)) && [ -n "$py312" ]; then
  copy_python "$py312" "${abi3[0]}" python312
else
  echo "test-wheel: no abi3 wheel or no CPython 3.12 for $SUITE: only the cp311 wheel is checked"
fi

# The cp310 wheel, on pyenv's CPython 3.10 (Debian 12 has 3.11 only); Debian 11's root
# has no 3.10 of its own built (tests/wheel/python_bullseye.sh builds 3.11 and 3.13).
cp310=(dist/headrace-*-cp310-cp310-manylinux_*_x86_64.whl)
py310=${PY310:-$(PYENV_VERSION=$(pyenv versions --bare 2>/dev/null | grep '^3\.10\.' | tail -1) \
                 pyenv which python3.10 2>/dev/null || true)}
if [ "$SUITE" = bookworm ] && ((${#cp310[@]} == 1)) && [ -n "$py310" ]; then
  copy_python "$py310" "${cp310[0]}" python310
else
  echo "test-wheel: no cp310 wheel or no CPython 3.10 for $SUITE: the cp310 wheel is not checked"
fi

echo "test-wheel: entering $CHROOT"
unshare --mount --propagation private bash -c '
  set -e
  mount -t proc proc "$1/proc"
  mount --rbind /dev "$1/dev"
  mount --bind "$2" "$1/root/.cache/pip"
  exec chroot "$1" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/host-ca.crt \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash /work/inside.sh' _ "$CHROOT" "$CACHE/pip-cache"
rm -rf "$CHROOT"
