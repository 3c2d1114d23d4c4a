#!/usr/bin/env bash
# `tests/wheel/python_bullseye.sh [3.11|3.13]`: a CPython for tests/wheel/run.sh's Debian
# 11 root, where python3 is 3.9: 3.11 for the cp311 wheel (Debian 12's python3.11 source
# package, upstream's 3.11.2 tarball), 3.13 for the abi3 one (Debian 13's python3.13,
# 3.13.5; Debian packages no 3.12). Compiled inside scripts/build_wheel_manylinux.sh's
# Debian 11 sysroot (chroot) by that root's own GCC 10, so it asks for nothing newer than
# glibc 2.31 and for the libraries (OpenSSL 1.1, libffi 7, zlib, ...) that Debian 11's
# python3 brings into the test root.
# (This machine's pyenv 3.11 cannot be copied in: `objdump -T` shows it asks for
# GLIBC_2.35. Compiling with this machine's GCC against the sysroot, as the wheel is,
# fails here: CPython's setup.py adds this machine's /usr/include to its modules' flags.)
# Installed at /opt/python<v>, packed as .whl/python<v>-bullseye.tar (made once, ~5 min
# on 2 cores); prints its path. pip comes with `python -m venv` inside the test root
# (ensurepip's bundled wheel).
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=$PWD/.whl
SYSROOT=$CACHE/sysroot-bullseye
V=${1:-3.11}
case $V in
  3.11) SUITE=bookworm ;;
  3.13) SUITE=trixie ;;
  *) echo "python_bullseye: 3.11 or 3.13, not $V" >&2; exit 1 ;;
esac
OUT=$CACHE/python$V-bullseye.tar
[ -f "$OUT" ] && { echo "$OUT"; exit 0; }
[ -f "$SYSROOT/.packages" ] || { echo "python_bullseye: no $SYSROOT: run \`make wheel-manylinux\`" >&2; exit 1; }

src=$CACHE/src-$SUITE
mkdir -p "$src/apt/lists/partial"
tarball=$(ls "$src"/python${V}_$V.*.orig.tar.[gx]z 2>/dev/null | head -1 || true)
if [ -z "$tarball" ]; then
  echo "deb-src http://deb.debian.org/debian $SUITE main" > "$src/apt/sources.list"
  APT=(-q -o Dir::Etc::SourceList="$src/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o Dir::State::Lists="$src/apt/lists")
  ls "$src"/apt/lists/*Sources* >/dev/null 2>&1 || apt-get "${APT[@]}" update >/dev/null
  (cd "$src" && apt-get "${APT[@]}" source --download-only "python$V" >/dev/null 2>&1)
  tarball=$(ls "$src"/python${V}_$V.*.orig.tar.[gx]z | head -1)
fi
# The build runs in the sysroot (its gcc and make: build_wheel_manylinux.sh's
# DEV_PACKAGES), in a private mount namespace, so /proc and /dev leave with it.
build=/tmp/python$V-build
rm -rf "$SYSROOT$build" "$SYSROOT$build.root"
mkdir -p "$SYSROOT$build"
tar -C "$SYSROOT$build" --strip-components=1 -xf "$tarball"
echo "python_bullseye: building $(basename "$tarball") inside $SYSROOT" >&2
unshare --mount --propagation private bash -c '
  set -e
  mount -t proc proc "$1/proc"
  mount --rbind /dev "$1/dev"
  exec chroot "$1" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd $2 && nice -n 19 ./configure --prefix=/opt/python$4 --with-ensurepip=no \
               > configure.log 2>&1 || { tail -20 configure.log; exit 1; }
             nice -n 19 make -j$3 > make.log 2>&1 || { tail -20 make.log; exit 1; }
             make install DESTDIR=$2.root > install.log 2>&1 || { tail -20 install.log; exit 1; }"
'  _ "$SYSROOT" "$build" "${JOBS:-2}" "$V"
# The modules the wheel's users and tests/wheel need, built (a missing -dev package in the
# sysroot skips a module, and setup.py only says so in its log).
for m in _ssl _ctypes zlib _bz2 _lzma _sqlite3 _uuid _hashlib; do
  ls "$SYSROOT$build.root/opt/python$V/lib/python$V/lib-dynload/$m.cpython-${V/./}"-*.so >/dev/null ||
    { echo "python_bullseye: module $m was not built" >&2; exit 1; }
done
tar -C "$SYSROOT$build.root" --exclude='test' --exclude='__pycache__' -cf "$OUT.tmp" opt
mv "$OUT.tmp" "$OUT"
rm -rf "$SYSROOT$build" "$SYSROOT$build.root"
echo "$OUT"
