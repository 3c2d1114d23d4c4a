#!/usr/bin/env bash
# `make test-wheel`, first: each wheel in dist/ is what `auditwheel show` says it is (issue
# 51: the tag auditwheel reports, not a renamed one). The manylinux tag in its file name
# must be the one auditwheel finds its glibc symbols constrain it to (the bridges' libarrow,
# left to pyarrow, makes its first line say linux_x86_64: docs/wheels.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "tests/wheel/tags.sh: $*" >&2; exit 1; }
auditwheel=$(ls .whl/venv-*/bin/auditwheel 2>/dev/null | head -1)
[ -n "$auditwheel" ] || die "no auditwheel in .whl/: build the wheels first (make wheel-manylinux)"
shopt -s nullglob
wheels=(dist/headrace-*.whl)
((${#wheels[@]})) || die "no wheel in dist/: make wheel-manylinux"
for wheel in "${wheels[@]}"; do
  tag=$(sed -nE 's/.*-(manylinux_[0-9]+_[0-9]+_x86_64)\.whl$/\1/p' <<< "$wheel")
  [ -n "$tag" ] || die "$wheel: no manylinux tag in its name"
  said=$("$auditwheel" show "$wheel" 2>/dev/null | tr '\n' ' ' | tr -s ' ')
  grep -qF "constrains the platform tag to \"$tag\"" <<< "$said" ||
    die "$wheel: auditwheel show does not say $tag: $(grep -oE 'constrains the platform tag to "[^"]*"' <<< "$said")"
  echo "tests/wheel/tags.sh: $(basename "$wheel"): auditwheel show says $tag"
done
