#!/usr/bin/env bash
# `make test-extras`: the pure-Python extras of pyproject.toml ([hf], [lightning],
# [megatron]) at both ends of their ranges. For each extra and end, a fresh environment in
# .gl/extras/EXTRA-END/ with
#   - torch as requirements-dev.txt pins it (the CPU wheel pip finds in /opt/wheels),
#     numpy, pyarrow (26.0.1, the one the source build's Arrow bridge is compiled for),
#     pytest and the tests' pillow;
#   - the extra's packages at that end: lower, each `>=` bound as `==` (the oldest release
#     the range admits); upper, the range as written (pip takes the newest release in it);
#   - headrace without compiling: this checkout's python/headrace with the extension and
#     the CLI that `make build` installed into .venv (it finds pyarrow beside it);
# then the tests that exercise the extra, one pytest process at a time. Prints a table
# (extra, end, versions, passed, failed, skipped); exits 1 if an environment could not be
# made or any test failed or was skipped (a test skipped for a missing package has not
# passed).
#
#   scripts/test_extras.sh                     # every extra, both ends
#   scripts/test_extras.sh hf:lower megatron   # some
#
# Not in `make test`: 11.5 to 12.5 minutes on 2 cores (2026-12-07, beside another
# engineer's tests): each environment ~1 minute to make (once pip's cache holds the
# packages), the [hf] tests 2 to 2.5 minutes an end, the others under half a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
OUT=$ROOT/.gl/extras

# The tests of each extra; test_model_inputs.py's Lightning and Megatron tests run with
# those extras. The [lightning] and [megatron] environments also get [hf]'s packages at
# the same end: test_model_inputs.py imports transformers, and its Lightning tests put a
# transformers model in a LightningModule. test_trainers_hf_ddp.py is left out: on the
# CPU, transformers < 5.18 cannot resume a run of several processes at all (its Trainer
# loads the optimizer state onto "cpu:0", which torch cannot restore; a GPU run loads it
# onto cuda:N), and `make test` runs it at requirements-dev.txt's version.
T=tests/python
MI=$T/test_model_inputs.py
MI_LIGHTNING=("$MI::test_the_lightning_module_gets_model_ready_batches"
              "$MI::test_forward_with_dummy_runs_the_tower_on_a_flagged_batch"
              "$MI::test_a_lightning_step_under_every_rank_gets_dummy_kinds")
MI_MEGATRON=("$MI::test_megatron_packed_seq_params_hold_each_sample_as_a_segment")
declare -A TESTS=(
  [hf]="$T/test_trainers_hf.py $T/test_preset_chat_template.py $T/test_qwen_vl_sft_example.py
        $MI $(printf -- '--deselect %s ' "${MI_LIGHTNING[@]}" "${MI_MEGATRON[@]}")"
  [lightning]="$T/test_trainers_lightning.py $T/test_trainers_lightning_ddp.py ${MI_LIGHTNING[*]}"
  [megatron]="$T/test_trainers_megatron.py ${MI_MEGATRON[*]}"
)
declare -A ALSO=([hf]="" [lightning]="hf" [megatron]="hf")

site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null) || {
  echo "test-extras: no .venv here: run \`make build\` first" >&2; exit 1; }
built=$site/headrace
if ! ls "$built"/_headrace*.so > /dev/null 2>&1 || [ ! -x "$built/bin/headrace" ]; then
  echo "test-extras: $built has no built extension (_headrace*.so) or bin/headrace: run" \
       "\`make build\` first" >&2
  exit 1
fi
# The real vocabularies the [hf] tests read (git-ignored): fetched once with .venv's
# converter (gguf), which these environments do not have.
for v in qwen2 llama3 gpt2; do
  [ -f "data/vocabs/$v/tokenizer.json" ] || { "$PY" scripts/fetch_vocabs.py --out data/vocabs; break; }
done

# requirements EXTRA END: the extra's requirements but torch, at that end.
requirements() {
  "$PY" - "$1" "$2" <<'EOF'
import sys, tomllib
from packaging.requirements import Requirement
extra, end = sys.argv[1:]
with open("pyproject.toml", "rb") as f:
    wanted = tomllib.load(f)["project"]["optional-dependencies"][extra]
for line in wanted:
    req = Requirement(line)
    if req.name == "torch":
        continue
    if end == "lower":
        lower = [s.version for s in req.specifier if s.operator == ">="]
        if not lower:
            sys.exit(f"test-extras: [{extra}] {line}: no lower bound (>=) to test")
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        line = f"{req.name}{extras}=={lower[0]}"
    print(line)
EOF
}

pin() {  # pin NAME: its line in requirements-dev.txt
  grep -E "^$1(\[[^]]*\])?[=<>~ ]" requirements-dev.txt | sed 's/ *#.*//' | head -1
}

run_one() {  # run_one EXTRA END
  local extra=$1 end=$2 env=$OUT/$1-$2
  rm -rf "$env" && mkdir -p "$OUT"
  "$PY" -m venv "$env"
  local reqs=() e lines
  for e in "$extra" ${ALSO[$extra]}; do
    lines=$(requirements "$e" "$end")
    mapfile -t -O "${#reqs[@]}" reqs <<< "$lines"
  done
  # One resolve: numpy's version is left to what the extra's packages allow.
  if ! "$env/bin/python" -m pip install -q "$(pin torch)" numpy "$(pin pyarrow)" "$(pin pytest)" \
        "$(pin pytest-timeout)" "$(pin pillow)" "${reqs[@]}" > "$env/pip.log" 2>&1; then
    echo "test-extras: $extra $end: pip could not install ${reqs[*]} (log: $env/pip.log):" >&2
    grep -v "^WARNING: Location" "$env/pip.log" | tail -15 >&2
    RESULTS+=("$extra|$end|${reqs[*]}|-|-|-|no environment")
    return
  fi
  local pkg
  pkg=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/headrace
  cp -r python/headrace "$pkg"
  cp "$built"/_headrace*.so "$pkg/"
  cp -r "$built/bin" "$pkg/"
  local versions
  versions=$("$env/bin/python" - "${reqs[@]}" <<'EOF'
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
names = ["torch", "numpy"] + [Requirement(r).name for r in sys.argv[1:]]
print(" ".join(f"{n} {version(n)}" for n in dict.fromkeys(names)))
EOF
)
  echo "test-extras: $extra $end: $versions"
  # shellcheck disable=SC2086  # TESTS holds paths and options, split on purpose
  HEADRACE_BIN=$pkg/bin/headrace "$env/bin/python" -m pytest -q -p no:cacheprovider -rfEs \
    --timeout 600 --junitxml "$env/junit.xml" ${TESTS[$extra]} > "$env/pytest.log" 2>&1 || true
  local counts
  counts=$("$env/bin/python" - "$env/junit.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("0|0|0"); sys.exit()
suites = [root] if root.tag == "testsuite" else list(root)
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
failed = n["failures"] + n["errors"]
print(f'{n["tests"] - failed - n["skipped"]}|{failed}|{n["skipped"]}')
EOF
)
  local passed failed skipped verdict=ok
  IFS='|' read -r passed failed skipped <<< "$counts"
  if [ "$failed" != 0 ] || [ "$skipped" != 0 ] || [ "$passed" = 0 ]; then
    verdict="FAILED (log: ${env#"$ROOT"/}/pytest.log)"
    grep -E "^(FAILED|ERROR|SKIPPED)" "$env/pytest.log" | head -20 >&2 || tail -20 "$env/pytest.log" >&2
  fi
  RESULTS+=("$extra|$end|$versions|$passed|$failed|$skipped|$verdict")
}

RUNS=()
for arg in "${@:-hf lightning megatron}"; do
  for a in $arg; do
    extra=${a%%:*} ends="lower upper"
    [[ $a == *:* ]] && ends=${a#*:}
    if [ -z "${TESTS[$extra]+x}" ] || [[ ! " lower upper " == *" $ends "* ]]; then
      echo "test-extras: $a: expected EXTRA or EXTRA:lower|upper, EXTRA one of: ${!TESTS[*]}" >&2
      exit 2
    fi
    for e in $ends; do RUNS+=("$extra $e"); done
  done
done
RESULTS=()
start=$SECONDS
for r in "${RUNS[@]}"; do
  # shellcheck disable=SC2086
  run_one $r
done

status=0
{
  echo "extra|end|installed|passed|failed|skipped|result"
  printf '%s\n' "${RESULTS[@]}"
} | column -t -s '|'
for r in "${RESULTS[@]}"; do [[ $r == *"|ok" ]] || status=1; done
echo "test-extras: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
exit $status
