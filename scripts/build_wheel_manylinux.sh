#!/usr/bin/env bash
# `make wheel-manylinux`: the wheels of `make wheel`, built for glibc 2.28 instead of this
# machine's 2.36, so that they install on RHEL/Rocky/Alma 8+, Debian 10+, Ubuntu 18.10+,
# Amazon Linux 2023 (docs/wheels.md). Same tags, cp310, cp311 and cp312-abi3, and the
# same `auditwheel repair`, with --plat manylinux_2_28_x86_64 (PLAT= picks another).
#
# How: this machine's g++ 12 compiles and links against a Debian 11 (bullseye, glibc
# 2.31) root file system used as a sysroot (--sysroot, CMAKE_SYSROOT, pkg-config's
# PKG_CONFIG_SYSROOT_DIR), made by debootstrap from deb.debian.org with the -dev packages
# of the libraries Headrace links. Every binary of the wheel then asks only for symbol
# versions that glibc 2.31 has: our extension and `headrace` (built here), and the
# libraries auditwheel vendors, which are bullseye's own builds or built here against
# the same root. libstdc++ is linked statically into our two binaries (-static-libstdc++,
# its symbols kept local): g++ 12's headers call GLIBCXX_3.4.29/30 functions that Debian
# 11's libstdc++ (GCC 10) lacks, and manylinux_2_31 allows only up to 3.4.28. The
# vendored C++ libraries use the system's libstdc++.so.6 as they were built to.
#
# Why not the alternatives (issue 51):
# - building inside a bullseye chroot with its own compiler: GCC 10 lacks C++20 parts the
#   code uses (`using enum` and std::bit_cast came in GCC 11; not tried), and bullseye
#   packages no newer GCC;
# - zig cc -target x86_64-linux-gnu.2.28: zig's C++ is libc++, while pyarrow's libarrow,
#   whose std::shared_ptr and std::string cross the Arrow bridges' calls, is built on
#   libstdc++ (the bridges are modules too, linked with the same static libstdc++).
# So the sysroot is glibc 2.31 (bullseye's, the oldest Debian that deb.debian.org still
# serves; no Debian 10 or RHEL 8 / manylinux_2_28 root is reachable from here), and what
# would hold the wheel above 2.28 is removed one by one (by `objdump -T`):
# - exp, exp2, log, log2, pow of GLIBC_2.29 (new versions without the SVID error path),
#   which anything compiled against glibc 2.29+ headers calls: bound to their GLIBC_2.2.5
#   versions, which every glibc since still exports, in what is compiled here by
#   scripts/glibc_2_28.h (forced into every compile by the wrappers), and in Debian 11's
#   libraries by scripts/glibc_compat_versions.py (their version-needed entry renamed;
#   it refuses any other symbol past 2.28);
# - pthread_cond_clockwait of GLIBC_2.30, which GCC 12's <condition_variable> calls:
#   defined in scripts/glibc_shims.c;
# - yaml-cpp, whose Debian 11 build needs GLIBCXX_3.4.26 (manylinux_2_28 allows 3.4.24):
#   Debian 12's source built here, static, into our binaries.
# `auditwheel repair --plat manylinux_2_28_x86_64` checks the result. No glibc 2.28 root
# is at hand to run it in: tests/wheel/run.sh runs it on 2.31 (Debian 11) and 2.36.
#
# The compilers are wrappers (.whl/toolchain-bullseye/): Debian's GCC also needs -B and -L
# into the sysroot, or it links this machine's glibc (below). The static libstdc++.a is
# GCC 12's, built on glibc 2.36: the two symbols it needs that 2.31 lacks are defined in
# scripts/glibc_shims.c.
#
# Libraries bullseye lacks or has too old, built here from Debian 12's source packages
# into the sysroot's /opt/hr (shared unless said): simdjson 3.0.1 (bullseye's 0.7),
# SentencePiece 0.1.97 (bullseye's 0.1.95 takes absl::string_view, not std::string_view),
# libyuv (static; not in bullseye), OpenH264 2.3.1 (not in bullseye; FFmpeg's H.264
# encoder) and the minimal FFmpeg (scripts/build_ffmpeg.sh, SYSROOT=). Each keeps its
# SIMD code (runtime dispatch, assembly on). Tesseract is bullseye's 4.1.1 (the same
# LSTM engine and eng.traineddata as 5.x; ops/ocr/text.cc builds with either).
#
# Cached in .whl/ (git-ignored): the sysroot (remade when the package list below changes),
# the libraries' builds (a stamp each), FFmpeg's, and the build folders
# build-wheel-bullseye-<tag>. The wheels replace `make wheel`'s in dist/: they install
# wherever those did.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/.whl
JOBS=${JOBS:-2}
SUITE=bullseye
SYSROOT=$CACHE/sysroot-$SUITE
HR=/opt/hr  # inside the sysroot: what is built here
PLAT=${PLAT:-manylinux_2_28_x86_64}
# The -dev packages of what CMakeLists.txt's pkg_check_modules asks for (less simdjson's,
# SentencePiece's, libyuv's and FFmpeg's, built below), and of CPython 3.11's modules
# (tests/wheel builds one inside this root: Debian 11's python3 is 3.9).
DEV_PACKAGES=libc6-dev,libgcc-10-dev,libturbojpeg0-dev,libpng-dev,libwebp-dev,libexif-dev
DEV_PACKAGES+=,libarchive-dev,libtesseract-dev,libutf8proc-dev
DEV_PACKAGES+=,libleptonica-dev,libfreetype-dev,liblzf-dev,libcurl4-openssl-dev,libssl-dev
DEV_PACKAGES+=,zlib1g-dev,libpcre2-dev,libffi-dev,libbz2-dev,liblzma-dev,libsqlite3-dev
DEV_PACKAGES+=,uuid-dev,gcc,make  # (gcc, make: GCC 10, for tests/wheel/python_bullseye.sh only)
SOURCES=(simdjson sentencepiece libyuv openh264 yaml-cpp)  # Debian 12 source packages built into $HR

die() { echo "build_wheel_manylinux: $*" >&2; exit 1; }
say() { echo "build_wheel_manylinux: $*"; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap)"

# This machine's tools: debootstrap, and nasm for OpenH264's assembly (built below, before
# scripts/build_ffmpeg.sh would install it; a fresh machine stopped there). And
# libopenh264-7, Debian 12's build of the OpenH264 built here: scripts/wheel_fixup.py
# takes the notices of what is built from Debian 12's source packages from this
# machine's installed packages (the others are installed by scripts/setup.sh).
missing=()
for p in debootstrap nasm libopenh264-7; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# --- The sysroot ------------------------------------------------------------------------
if [ "$(cat "$SYSROOT/.packages" 2>/dev/null)" != "$DEV_PACKAGES" ]; then
  say "debootstrap $SUITE + its -dev packages into $SYSROOT (~3 min)"
  rm -rf "$SYSROOT" "$SYSROOT.tmp"
  nice -n 19 debootstrap --variant=minbase --include="$DEV_PACKAGES" "$SUITE" "$SYSROOT.tmp" \
    http://deb.debian.org/debian > "$CACHE/debootstrap-$SUITE.log" 2>&1 || {
    tail -20 "$CACHE/debootstrap-$SUITE.log"; die "debootstrap failed"; }
  rm -f "$SYSROOT.tmp"/var/cache/apt/archives/*.deb
  # Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.11) would send the
  # linker to this machine's libraries: made relative, inside the root.
  find "$SYSROOT.tmp" -type l -lname '/*' -print0 | while IFS= read -r -d '' link; do
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$SYSROOT.tmp$(readlink "$link")")" "$link"
  done
  # cpp-httplib (header-only, bullseye has none): CMakeLists.txt asks for it, only the
  # tests, not built here, include it.
  mkdir -p "$SYSROOT.tmp/usr/share/pkgconfig"
  printf 'Name: cpp-httplib\nDescription: (not used by the wheel)\nVersion: 0\nCflags:\n' \
    > "$SYSROOT.tmp/usr/share/pkgconfig/cpp-httplib.pc"
  # nlohmann/json, header-only: bullseye's 3.9 is older than ops/text asks (3.10), so
  # this machine's (Debian 12, 3.11) headers and CMake package, which need no glibc.
  mkdir -p "$SYSROOT.tmp$HR/include" "$SYSROOT.tmp$HR/share/cmake"
  cp -r /usr/include/nlohmann "$SYSROOT.tmp$HR/include/"
  cp -r /usr/share/cmake/nlohmann_json "$SYSROOT.tmp$HR/share/cmake/"
  echo "$DEV_PACKAGES" > "$SYSROOT.tmp/.packages"
  mv "$SYSROOT.tmp" "$SYSROOT"
fi

# The compilers: this machine's gcc and g++ behind wrappers that add the sysroot. Besides
# --sysroot, Debian's GCC needs -B (the C runtime's crt1.o/crti.o) and -L (libc.so,
# libm.so, ...) pointing into it: its own search path names /usr/lib/x86_64-linux-gnu
# relative to GCC's folder, which --sysroot does not move, so without them it links this
# machine's glibc 2.36 and the binaries ask for GLIBC_2.34/2.35 symbols.
TC=$CACHE/toolchain-$SUITE
mkdir -p "$TC"
for tool in gcc g++; do
  printf '#!/bin/sh\nexec /usr/bin/%s --sysroot=%s -B%s/usr/lib/x86_64-linux-gnu/ -L%s/usr/lib/x86_64-linux-gnu -include %s "$@"\n' \
    "$tool" "$SYSROOT" "$SYSROOT" "$SYSROOT" "$ROOT/scripts/glibc_2_28.h" > "$TC/$tool.tmp"
  chmod +x "$TC/$tool.tmp"
  cmp -s "$TC/$tool.tmp" "$TC/$tool" && rm "$TC/$tool.tmp" || mv "$TC/$tool.tmp" "$TC/$tool"
done
export CC=$TC/gcc CXX=$TC/g++
"$CC" -O2 -fPIC -Wall -Werror -c scripts/glibc_shims.c -o "$TC/glibc_shims.o"
# How every C++ binary built here is linked: GCC 12's libstdc++ inside it, its symbols
# local, the two glibc 2.32+ symbols that libstdc++.a asks for (scripts/glibc_shims.c),
# and libpthread (in glibc 2.31 still a library of its own, which libstdc++.a uses).
# (A C++ link without it fails: g++ then finds GCC 12's libstdc++.so, outside the sysroot,
# which asks for glibc 2.33+.)
STATIC_LIBSTDCXX="-static-libstdc++ -Wl,--exclude-libs,libstdc++.a $TC/glibc_shims.o -pthread"

export PKG_CONFIG_SYSROOT_DIR=$SYSROOT
export PKG_CONFIG_LIBDIR=$SYSROOT$HR/lib/pkgconfig:$SYSROOT/usr/lib/x86_64-linux-gnu/pkgconfig:$SYSROOT/usr/share/pkgconfig
# (Programs, ar and ranlib among them, are this machine's, never the sysroot's.)
CMAKE_SYSROOT_ARGS=(-DCMAKE_SYSROOT="$SYSROOT" -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER
                    -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX"
                    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$HR"
                    -DCMAKE_INSTALL_LIBDIR=lib)
# A library's stamp holds the toolchain it was built with: a change rebuilds them all.
TOOLCHAIN_ID=$(cat "$TC/gcc" "$TC/g++" scripts/glibc_shims.c scripts/glibc_2_28.h | sha256sum | cut -c1-16)

# --- Libraries from Debian 12's source packages -----------------------------------------
mkdir -p "$CACHE/src-bookworm/apt/lists/partial"
echo "deb-src http://deb.debian.org/debian bookworm main" > "$CACHE/src-bookworm/apt/sources.list"
APT=(-q -o Dir::Etc::SourceList="$CACHE/src-bookworm/apt/sources.list"
     -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$CACHE/src-bookworm/apt/lists")
unpacked() {  # PACKAGE: the folder of its unpacked Debian 12 source package
  local dir
  dir=$(find "$CACHE/src-bookworm" -maxdepth 1 -type d -name "$1-*" | head -1)
  if [ -z "$dir" ]; then
    ls "$CACHE"/src-bookworm/apt/lists/*Sources* >/dev/null 2>&1 || apt-get "${APT[@]}" update >/dev/null
    (cd "$CACHE/src-bookworm" && apt-get "${APT[@]}" source "$1" >/dev/null 2>&1) ||
      die "apt-get source $1 failed"
    dir=$(find "$CACHE/src-bookworm" -maxdepth 1 -type d -name "$1-*" | head -1)
  fi
  echo "$dir"
}
for pkg in "${SOURCES[@]}"; do
  stamp=$SYSROOT$HR/.built-$pkg
  [ "$(cat "$stamp" 2>/dev/null)" = "$TOOLCHAIN_ID" ] && continue
  src=$(unpacked "$pkg")
  build=$CACHE/build-$SUITE-$pkg
  say "building $(basename "$src") into the sysroot's $HR"
  rm -rf "$build"
  mkdir -p "$build"
  case $pkg in
    simdjson)
      nice -n 19 cmake -S "$src" -B "$build" "${CMAKE_SYSROOT_ARGS[@]}" -DBUILD_SHARED_LIBS=ON \
        -DSIMDJSON_DEVELOPER_MODE=OFF > "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      nice -n 19 cmake --build "$build" -j "$JOBS" >> "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      DESTDIR=$SYSROOT cmake --install "$build" >> "$build/log" 2>&1 ;;
    sentencepiece)
      # Its own protobuf-lite inside; no tcmalloc. libstdc++ static, as for our binaries.
      nice -n 19 cmake -S "$src" -B "$build" "${CMAKE_SYSROOT_ARGS[@]}" -DSPM_ENABLE_SHARED=ON \
        -DSPM_ENABLE_TCMALLOC=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
        -DCMAKE_SHARED_LINKER_FLAGS="$STATIC_LIBSTDCXX" -DCMAKE_EXE_LINKER_FLAGS="$STATIC_LIBSTDCXX" \
        > "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      nice -n 19 cmake --build "$build" -j "$JOBS" >> "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      DESTDIR=$SYSROOT cmake --install "$build" >> "$build/log" 2>&1 ;;
    libyuv)
      # Static and position-independent, linked into our binaries; without libjpeg (its
      # MJPEG path, which Headrace does not call).
      nice -n 19 cmake -S "$src" -B "$build" "${CMAKE_SYSROOT_ARGS[@]}" \
        -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_DISABLE_FIND_PACKAGE_JPEG=ON \
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5 > "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      nice -n 19 cmake --build "$build" -j "$JOBS" --target yuv >> "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      mkdir -p "$SYSROOT$HR/lib" "$SYSROOT$HR/include"
      cp "$build/libyuv.a" "$SYSROOT$HR/lib/"
      cp -r "$src/include/." "$SYSROOT$HR/include/" ;;
    yaml-cpp)
      # Static and position-independent, linked into our binaries (Debian 11's shared one
      # needs GLIBCXX_3.4.26, past manylinux_2_28); libstdc++ is then ours, static.
      nice -n 19 cmake -S "$src" -B "$build" "${CMAKE_SYSROOT_ARGS[@]}" \
        -DYAML_BUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        -DYAML_CPP_BUILD_TESTS=OFF -DYAML_CPP_BUILD_TOOLS=OFF -DYAML_CPP_BUILD_CONTRIB=OFF \
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5 > "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      nice -n 19 cmake --build "$build" -j "$JOBS" >> "$build/log" 2>&1 || { tail -20 "$build/log"; exit 1; }
      DESTDIR=$SYSROOT cmake --install "$build" >> "$build/log" 2>&1 ;;
    openh264)
      # Its own Makefile; assembly on (nasm). libstdc++ static, as for our binaries. (Its
      # install target links again: the same variables there.)
      cp -a "$src/." "$build/"
      vars=(OS=linux ARCH=x86_64 USE_ASM=Yes PREFIX="$HR" CC="$CC" CXX="$CXX"
            LDFLAGS="-lpthread $STATIC_LIBSTDCXX")
      nice -n 19 make -C "$build" -j "$JOBS" "${vars[@]}" libraries > "$build/log" 2>&1 ||
        { tail -20 "$build/log"; exit 1; }
      make -C "$build" "${vars[@]}" DESTDIR="$SYSROOT" install-shared >> "$build/log" 2>&1 ||
        { tail -20 "$build/log"; exit 1; } ;;
  esac
  echo "$TOOLCHAIN_ID" > "$stamp"
done

SYSROOT=$SYSROOT TOOLCHAIN_ID=$TOOLCHAIN_ID scripts/build_ffmpeg.sh

# What is built here must be the only copy of its name in the sysroot: a Debian 11 one
# (its -dev package, or a package that depends on it) comes first on some link lines, as
# libsimdjson 0.7's did once: the binaries then called 0.7 with 3.0's structures, and
# every JSON parse failed.
for lib in libsimdjson libsentencepiece libyuv libopenh264 libyaml-cpp libavcodec libavformat \
           libavutil libswscale libswresample; do
  if compgen -G "$SYSROOT/usr/lib/x86_64-linux-gnu/$lib[.-]*" >/dev/null; then
    die "the sysroot has Debian 11's $lib besides $HR's: remove its package (or $SYSROOT)"
  fi
done

# --- The wheels --------------------------------------------------------------------------
# auditwheel finds the libraries to vendor through LD_LIBRARY_PATH: the sysroot's, never
# this machine's. The folder holds links to all of them but glibc's own and libstdc++/
# libgcc_s (the policy's, taken from the user's system), so that auditwheel's own Python
# keeps this machine's C library.
LIBS=$CACHE/libs-$SUITE
rm -rf "$LIBS"
mkdir -p "$LIBS"
for dir in "$SYSROOT$HR/lib" "$SYSROOT/usr/lib/x86_64-linux-gnu"; do
  for f in "$dir"/*.so.*; do
    case $(basename "$f") in
      libc.so.*|libm.so.*|libmvec.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|libutil.so.*|\
      libnsl.so.*|libanl.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*|libBrokenLocale.so.*|\
      libthread_db.so.*|libcrypt.so.*) ;;
      *) [ -e "$LIBS/$(basename "$f")" ] && continue
         # Debian 11's libm calls of GLIBC_2.29 bound to GLIBC_2.2.5 (above): a copy
         # where the library has them, else a link.
         # (Not `objdump | grep -q`: under pipefail, grep's early exit fails the pipe.)
         if grep -q 'GLIBC_2\.29' <<< "$(objdump -T "$f" 2>/dev/null)"; then
           python3 scripts/glibc_compat_versions.py "$f" "$LIBS/$(basename "$f")" ||
             ln -s "$f" "$LIBS/$(basename "$f")"  # (auditwheel refuses it if the wheel needs it)
         else
           ln -s "$f" "$LIBS/$(basename "$f")"
         fi ;;
    esac
  done
done

# libyuv and yaml-cpp, linked in statically, stay local to each binary as libstdc++ does:
# a copy another library in the process exports never serves our calls.
LINK_FLAGS="$STATIC_LIBSTDCXX -Wl,--exclude-libs,libyuv.a:libyaml-cpp.a"
export WHEEL_PLAT=$PLAT WHEEL_LIBRARY_PATH=$LIBS WHEEL_BUILD_SUFFIX=-$SUITE
# The notices (scripts/wheel_fixup.py): the sysroot's packages; libyuv, linked in, is
# this machine's libyuv0 and libyaml-cpp0.7 (the same Debian 12 source packages and versions).
export WHEEL_DPKG_ROOT=$SYSROOT WHEEL_LINKED_PACKAGES="libyuv0 libyaml-cpp0.7"
export WHEEL_CMAKE_DEFINES="CMAKE_SYSROOT=$SYSROOT;CMAKE_EXE_LINKER_FLAGS=$LINK_FLAGS"
WHEEL_CMAKE_DEFINES+=";CMAKE_C_COMPILER=$CC;CMAKE_CXX_COMPILER=$CXX;CMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER"
WHEEL_CMAKE_DEFINES+=";CMAKE_SHARED_LINKER_FLAGS=$LINK_FLAGS;CMAKE_MODULE_LINKER_FLAGS=$LINK_FLAGS"
# (Under the sysroot: libyuv, whose headers no pkg-config file names, and nlohmann_json.)
WHEEL_CMAKE_DEFINES+=";CMAKE_PREFIX_PATH=$HR;CMAKE_CXX_FLAGS=-isystem $SYSROOT$HR/include"
exec scripts/build_wheel.sh
