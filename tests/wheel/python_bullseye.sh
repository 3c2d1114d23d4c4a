#!/usr/bin/env bash
# A CPython 3.11 for tests/wheel/run.sh's Debian 11 root, where python3 is 3.9 and the
# wheel needs 3.11: Debian 12's python3.11 source package (upstream's 3.11.2 tarball),
# compiled inside scripts/build_wheel_manylinux.sh's Debian 11 sysroot (chroot) by that
# root's own GCC 10, so it asks for nothing newer than glibc 2.31 and for the libraries
# (OpenSSL 1.1, libffi 7, zlib, ...) that Debian 11's python3 brings into the test root.
# (This machine's pyenv 3.11 cannot be copied in: `objdump -T` shows it asks for
# GLIBC_2.35. Compiling with this machine's GCC against the sysroot, as the wheel is,
# fails here: CPython's setup.py adds this machine's /usr/include to its modules' flags.)
# Installed at /opt/python3.11, packed as .whl/python3.11-bullseye.tar (made once, ~5 min
# on 2 cores); prints its path. pip comes with `python -m venv` inside the test root
# (ensurepip's bundled wheel).
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=$PWD/.whl
SYSROOT=$CACHE/sysroot-bullseye
OUT=$CACHE/python3.11-bullseye.tar
[ -f "$OUT" ] && { echo "$OUT"; exit 0; }
[ -f "$SYSROOT/.packages" ] || { echo "python_bullseye: no $SYSROOT: run \`make wheel-manylinux\`" >&2; exit 1; }

src=$CACHE/src-bookworm
mkdir -p "$src/apt/lists/partial"
tarball=$(ls "$src"/python3.11_3.11.*.orig.tar.gz 2>/dev/null | head -1 || true)
if [ -z "$tarball" ]; then
  echo "deb-src http://deb.debian.org/debian bookworm main" > "$src/apt/sources.list"
  APT=(-q -o Dir::Etc::SourceList="$src/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o Dir::State::Lists="$src/apt/lists")
  ls "$src"/apt/lists/*Sources* >/dev/null 2>&1 || apt-get "${APT[@]}" update >/dev/null
  (cd "$src" && apt-get "${APT[@]}" source --download-only python3.11 >/dev/null 2>&1)
  tarball=$(ls "$src"/python3.11_3.11.*.orig.tar.gz | head -1)
fi
# The build runs in the sysroot (its gcc and make: build_wheel_manylinux.sh's
# DEV_PACKAGES), in a private mount namespace, so /proc and /dev leave with it.
build=/tmp/python3.11-build
rm -rf "$SYSROOT$build" "$SYSROOT$build.root"
mkdir -p "$SYSROOT$build"
tar -C "$SYSROOT$build" --strip-components=1 -xzf "$tarball"
echo "python_bullseye: building $(basename "$tarball") inside $SYSROOT" >&2
unshare --mount --propagation private bash -c '
  set -e
  mount -t proc proc "$1/proc"
  mount --rbind /dev "$1/dev"
  exec chroot "$1" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd $2 && nice -n 19 ./configure --prefix=/opt/python3.11 --with-ensurepip=no \
               > configure.log 2>&1 || { tail -20 configure.log; exit 1; }
             nice -n 19 make -j$3 > make.log 2>&1 || { tail -20 make.log; exit 1; }
             make install DESTDIR=$2.root > install.log 2>&1 || { tail -20 install.log; exit 1; }"
' _ "$SYSROOT" "$build" "${JOBS:-2}"
# The modules the wheel's users and tests/wheel need, built (a missing -dev package in the
# sysroot skips a module, and setup.py only says so in its log).
for m in _ssl _ctypes zlib _bz2 _lzma _sqlite3 _uuid _hashlib; do
  ls "$SYSROOT$build.root"/opt/python3.11/lib/python3.11/lib-dynload/"$m".cpython-311-*.so >/dev/null ||
    { echo "python_bullseye: module $m was not built" >&2; exit 1; }
done
tar -C "$SYSROOT$build.root" --exclude='test' --exclude='__pycache__' -cf "$OUT.tmp" opt
mv "$OUT.tmp" "$OUT"
rm -rf "$SYSROOT$build" "$SYSROOT$build.root"
echo "$OUT"
