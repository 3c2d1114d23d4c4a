#!/usr/bin/env bash
# A minimal FFmpeg for the wheel (`make wheel`, scripts/build_wheel.sh), installed into
# .whl/ffmpeg/prefix; prints nothing and returns at once when it is already there.
#
# Why: Debian's FFmpeg libraries bring ~95 more (x265, codec2, SVT-AV1, aom, vpx, dav1d,
# rav1e, librsvg and its cairo/pango, libjxl, openmpt, gnutls, ...); auditwheel would
# vendor every one of them: ~44 MiB compressed against this build's 3.4, and the wheel
# over its 50 MiB budget (measured: 70 MiB of libraries in all, 26 without FFmpeg's). This
# build is Debian's own source package (the same 5.1 release and patches as the FFmpeg
# that `make build` links) with only what the operators call: the decoders, demuxers and
# parsers of the containers and codecs below, swscale and swresample, and what
# `headrace make-sample --modalities video,audio` encodes (H.264 into MP4, PCM into
# WAV). Assembly stays on (nasm): the decoders and swscale run at Debian's speed.
# Only the wheel uses it; `make build` keeps Debian's FFmpeg.
# No GPL part (no --enable-gpl): FFmpeg is then LGPL-2.1-or-later, and the wheel can be
# shipped under Apache-2.0 (docs/wheels.md, "Licence"). H.264 is encoded by OpenH264
# (BSD-2-Clause, Debian's libopenh264) rather than x264 (GPL); scripts/wheel_fixup.py
# checks libavcodec says "LGPL".
#
# SYSROOT=/path (scripts/build_wheel_manylinux.sh): built by CC (its compiler for that
# root) against that root's glibc and libraries (its zlib, its OpenH264 in /opt/hr) and
# installed into its /opt/hr, beside the other libraries built there; the build folder is
# .whl/ffmpeg-<root's name>. TOOLCHAIN_ID, when it changes, rebuilds.
set -euo pipefail
cd "$(dirname "$0")/.."

SYSROOT=${SYSROOT:-}
if [ -n "$SYSROOT" ]; then
  CACHE=$PWD/.whl/ffmpeg-$(basename "$SYSROOT")
  PREFIX=/opt/hr
  DESTDIR=$SYSROOT
else
  CACHE=$PWD/.whl/ffmpeg
  PREFIX=$CACHE/prefix
  DESTDIR=
fi
STAMP=$DESTDIR$PREFIX/.configure-flags

# Containers and codecs a training set of video and audio uses (ops/av, ops/video,
# ops/audio). Anything else fails its sample as an unknown format, as it would with a
# Debian FFmpeg that lacked the codec.
DECODERS=h264,hevc,mpeg4,vp8,vp9,aac,aac_latm,mp3,mp3float,flac,opus,vorbis,alac
DECODERS+=,pcm_s16le,pcm_s16be,pcm_s24le,pcm_s32le,pcm_f32le,pcm_f64le,pcm_u8
DECODERS+=,pcm_alaw,pcm_mulaw
DEMUXERS=mov,matroska,wav,flac,ogg,mp3,aac
PARSERS=h264,hevc,mpeg4video,vp8,vp9,aac,aac_latm,mpegaudio,flac,opus,vorbis
ENCODERS=libopenh264,pcm_s16le
MUXERS=mp4,mov,wav

FLAGS=(
  --prefix="$PREFIX" --enable-shared --disable-static --enable-pic
  --disable-programs --disable-doc --disable-network --disable-autodetect
  --disable-everything --disable-avdevice --disable-avfilter --disable-postproc
  --enable-avcodec --enable-avformat --enable-swscale --enable-swresample
  --enable-pthreads --enable-zlib --enable-libopenh264
  --enable-decoder="$DECODERS" --enable-demuxer="$DEMUXERS" --enable-parser="$PARSERS"
  --enable-encoder="$ENCODERS" --enable-muxer="$MUXERS" --enable-protocol=file
  --extra-cflags=-O3
)
if [ -n "$SYSROOT" ]; then
  FLAGS+=(--cc="${CC:?CC: the compiler for $SYSROOT}" --sysroot="$SYSROOT")
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "${FLAGS[*]}${TOOLCHAIN_ID:+ $TOOLCHAIN_ID}" ]; then
  exit 0
fi

missing=()
host_packages=(nasm dpkg-dev)
[ -n "$SYSROOT" ] || host_packages+=(libopenh264-dev zlib1g-dev)
for p in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "build_ffmpeg: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Debian's source package through a private apt state (the machine's sources list has
# no deb-src lines and is left as it is).
# (A sysroot build shares the host build's source package when there is one.)
if [ -n "$SYSROOT" ] && [ ! -e "$CACHE/src" ] && [ -d "$PWD/.whl/ffmpeg/src" ]; then
  mkdir -p "$CACHE"
  ln -s ../ffmpeg/src "$CACHE/src"
fi
mkdir -p "$CACHE/apt/lists/partial" "$CACHE/src"
cat > "$CACHE/apt/sources.list" <<'EOF'
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian-security bookworm-security main
EOF
APT=(-q -o Dir::Etc::SourceList="$CACHE/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$CACHE/apt/lists")
SRC=$(ls -d "$CACHE"/src/ffmpeg-5.1*/ 2>/dev/null | head -1 || true)
if [ -z "$SRC" ]; then
  echo "build_ffmpeg: fetching Debian's ffmpeg source package"
  apt-get "${APT[@]}" update >/dev/null
  (cd "$CACHE/src" && apt-get "${APT[@]}" source ffmpeg >/dev/null 2>&1)
  SRC=$(ls -d "$CACHE"/src/ffmpeg-5.1*/ | head -1)
fi

echo "build_ffmpeg: building $(basename "$SRC") into $PREFIX"
rm -rf "$CACHE/build"
if [ -n "$SYSROOT" ]; then  # /opt/hr holds other libraries too
  rm -rf "$DESTDIR$PREFIX"/lib/libav* "$DESTDIR$PREFIX"/lib/libsw* \
    "$DESTDIR$PREFIX"/include/libav* "$DESTDIR$PREFIX"/include/libsw*
else
  rm -rf "$PREFIX"
fi
mkdir -p "$CACHE/build"
cd "$CACHE/build"
nice -n 19 "$SRC/configure" "${FLAGS[@]}" > configure.log 2>&1 || { tail -30 configure.log; exit 1; }
grep -q '^HAVE_X86ASM=yes' ffbuild/config.mak || { echo "build_ffmpeg: assembly is off (nasm?)" >&2; exit 1; }
nice -n 19 make -j "${JOBS:-2}" > make.log 2>&1 || { tail -30 make.log; exit 1; }
make install DESTDIR="$DESTDIR" > install.log 2>&1
echo "${FLAGS[*]}${TOOLCHAIN_ID:+ $TOOLCHAIN_ID}" > "$STAMP"
