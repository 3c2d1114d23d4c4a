#!/usr/bin/env bash
# fuzz/run.sh BUILD_DIR SECONDS TARGET...: runs each libFuzzer target of BUILD_DIR for
# SECONDS on its corpus, one after the other, and prints one line of figures per target.
# Exits 1 when any target found a crash, a leak, a timeout or went over the RSS limit;
# the input that did it is in fuzz-crashes/TARGET/.
#
# Corpora grow in fuzz-corpus/TARGET/ (ignored by git) and start from the generated
# seeds (BUILD_DIR/fuzz-seeds/TARGET). Environment: FUZZ_RSS_MB (default 2048),
# FUZZ_TIMEOUT_S per input (default 10), FUZZ_ARGS (more libFuzzer flags).
set -uo pipefail
cd "$(dirname "$0")/.."

build=$1 seconds=$2
shift 2
rss_mb=${FUZZ_RSS_MB:-2048}
timeout_s=${FUZZ_TIMEOUT_S:-10}

"$build/fuzz/hr_fuzz_seeds" "$build/fuzz-seeds" || exit 1

failed=()
summary=()
for target in "$@"; do
  corpus=fuzz-corpus/$target crashes=fuzz-crashes/$target log=fuzz-crashes/$target.log
  mkdir -p "$corpus" "$crashes"
  dict=()
  [ -f "fuzz/$target.dict" ] && dict=(-dict="fuzz/$target.dict")
  echo "fuzz: $target for ${seconds}s (log: $log)"
  # shellcheck disable=SC2086
  "$build/fuzz/hr_fuzz_$target" -max_total_time="$seconds" -rss_limit_mb="$rss_mb" \
    -malloc_limit_mb="$rss_mb" -timeout="$timeout_s" -print_final_stats=1 \
    -artifact_prefix="$crashes/" "${dict[@]}" ${FUZZ_ARGS:-} \
    "$corpus" "$build/fuzz-seeds/$target" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  files=$(find "$corpus" -type f | wc -l)
  line=$(printf '%-9s %10s runs  %5s s  peak RSS %5s MB of %s  corpus %5s  exit %s' \
    "$target" "${runs:-?}" "$seconds" "${rss:-?}" "$rss_mb" "$files" "$rc")
  summary+=("$line")
  if [ "$rc" -ne 0 ]; then
    failed+=("$target")
    grep -m1 -E 'ERROR|runtime error|check failed|out-of-memory|timeout' "$log" || tail -20 "$log"
  fi
done
echo "fuzz: figures ($(date -u +%Y-%m-%d), $(nproc) cores)"
printf '  %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (inputs in fuzz-crashes/; replay with the target and the file)"
  exit 1
fi
