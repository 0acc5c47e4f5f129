#!/usr/bin/env bash
# gpu_procedure.sh — the parts of the GPU procedure (scripts/gpu_check.sh, gpu_bundle.sh,
# gpu_rehearsal.sh) that CI can check without root, a bundle or a GPU (`make gpu-rehearsal`
# checks the rest on a bare root):
#   * every script parses (bash -n), `gpu_check.sh --help` prints its usage, an unknown
#     argument or GPU_CHECK_PARTS group is exit 2;
#   * without .device/spikemesh.tar.xz the preflight stops at once (exit 2, one line naming
#     gpu_bundle.sh) and the summary still prints;
#   * the GPU-only steps' `spikemesh bench` flags (sections 2-2b of gpu_check.sh) are all
#     options of this build's `bench` (a renamed flag would otherwise first fail on a GPU);
#   * the profile check embedded in gpu_check.sh passes plausible profiles and fails a missing
#     or implausible one;
#   * the skip rule: a GPU test that skips (no GPU here) fails a test step with exit 3 naming
#     it, with and without --gtest_brief; CPU tests that pass give 0; a filter matching
#     nothing gives 4.
# Prints "gpu_procedure: N passed, M failed"; ~5 s.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${BIN:-$ROOT/build/bin/spikemesh}")
TESTS=$(dirname "$BIN")/spikemesh_tests
PASS=0 FAIL=0
ok() { PASS=$((PASS + 1)); echo "  ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "  FAIL $1"; }
T=$(mktemp -d /tmp/gpu_procedure.XXXXXX)
trap 'rm -rf "$T"' EXIT

for s in gpu_check.sh gpu_bundle.sh gpu_rehearsal.sh bench_deps.sh check_includes.sh; do
  bash -n "$ROOT/scripts/$s" && ok "scripts/$s parses" || bad "scripts/$s does not parse"
done
bash "$ROOT/scripts/gpu_check.sh" --help >"$T/help" 2>&1 && grep -q "preflight" "$T/help" && grep -q "GPU_CHECK_BUDGET_S" "$T/help" &&
  ok "gpu_check.sh --help prints the procedure" || bad "gpu_check.sh --help"
bash "$ROOT/scripts/gpu_check.sh" --bogus >"$T/bogus" 2>&1
[ $? -eq 2 ] && grep -q "unknown argument '--bogus'" "$T/bogus" && ok "an unknown argument: exit 2" || bad "unknown argument"
GPU_CHECK_PARTS=unit,bogus bash "$ROOT/scripts/gpu_check.sh" --no-gpu >"$T/parts" 2>&1
[ $? -eq 2 ] && grep -q "unknown group 'bogus' in GPU_CHECK_PARTS" "$T/parts" && ok "an unknown GPU_CHECK_PARTS group: exit 2" ||
  bad "unknown GPU_CHECK_PARTS group"

# a copy of the scripts without .device: the preflight names what is missing, exit 2
mkdir -p "$T/tree/scripts" && cp "$ROOT/scripts/gpu_check.sh" "$T/tree/scripts/"
OUT="$T/out" bash "$T/tree/scripts/gpu_check.sh" --no-gpu >"$T/nobundle" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "PREFLIGHT FAILED: no .device/spikemesh.tar.xz: run scripts/gpu_bundle.sh" "$T/nobundle" &&
   grep -q "^gpu_check (rehearsal):.*exit 2" "$T/nobundle" && [ -s "$T/out/summary.txt" ]; then
  ok "no bundle: preflight exit 2, summary printed and written"
else bad "no bundle: exit $rc"; tail -3 "$T/nobundle"; fi

# flags of the bench commands in sections 2-2b (comments and the embedded Python left out)
flags=$(sed -n "/^# ---- 2\. spikemesh's benchmarks/,/^  PART=auto/p" "$ROOT/scripts/gpu_check.sh" |
  sed '/^cat >"\$WORK\/profile_check.py"/,/^PYEOF/d' | grep -v '^ *#' | grep -o -- ' --[a-z][a-z0-9-]*' | sort -u)
help=$("$BIN" bench --help 2>&1)
unknown=$(for f in $flags; do grep -q -- "\(^ *\|,\)$f\b" <<<"$help" || echo "$f"; done)
[ -n "$flags" ] && [ -z "$unknown" ] && ok "gpu_check.sh's bench flags ($(echo $flags | wc -w)) are all bench options" ||
  bad "gpu_check.sh passes bench flags this build does not know: $(echo $unknown)"
# the embedded profile check on made-up records: plausible passes, missing/implausible fails
sed -n '/^cat >"$WORK\/profile_check.py"/,/^PYEOF/p' "$ROOT/scripts/gpu_check.sh" | sed '1d;$d' >"$T/profile_check.py"
"${PY:-python3}" - "$T" <<'PYEOF'
import json, sys
d = sys.argv[1]
def rec(model, batch, rows_ms, step_ms):
    return json.dumps({"backend": "spikemesh", "model": model, "batch_size": batch, "precision": "fp32",
                       "layer_profile": {"step_ms": step_ms, "rows": [{"layer": f"l{i}", "pass": "forward", "ms": m}
                                                                      for i, m in enumerate(rows_ms)]}})
open(f"{d}/good.jsonl", "w").write(rec("cifar10dvs_vgg", 32, [3.0, 2.0], 10.0) + "\n" + rec("spikformer_ti", 4, [1.0], 2.0) + "\n")
open(f"{d}/over.jsonl", "w").write(rec("cifar10dvs_vgg", 32, [3.0, 9.0], 10.0) + "\n" + rec("spikformer_ti", 4, [1.0], 2.0) + "\n")
open(f"{d}/none.jsonl", "w").write(rec("cifar10dvs_vgg", 32, [3.0], 10.0) + "\n")
PYEOF
"${PY:-python3}" "$T/profile_check.py" "$T/good.jsonl" >"$T/pc_good" 2>&1 && grep -q "cifar10dvs_vgg b32 fp32: step 10.00 ms, 2 rows" "$T/pc_good" &&
  ! "${PY:-python3}" "$T/profile_check.py" "$T/over.jsonl" >/dev/null 2>&1 &&
  ! "${PY:-python3}" "$T/profile_check.py" "$T/none.jsonl" >"$T/pc_none" 2>&1 && grep -q "spikformer_ti b4 fp32: no record" "$T/pc_none" &&
  ok "gpu_check.sh's profile check: plausible passes, rows past the step or a missing profile fail" ||
  bad "gpu_check.sh's profile check"

if [ ! -x "$TESTS" ]; then bad "$TESTS not built"; else
  NOSKIP=(bash "$ROOT/scripts/gpu_check.sh" --gtest-no-skip "$TESTS" --gtest_color=no)
  if [ "$("$TESTS" --gtest_list_tests --gtest_filter='GpuPool.*' | grep -c '^  ')" -gt 0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    for brief in 0 1; do
      "${NOSKIP[@]}" --gtest_brief=$brief --gtest_filter='GpuPool.*' >"$T/skip$brief" 2>&1
      rc=$?
      [ $rc -eq 3 ] && grep -q "GPU test(s) were skipped" "$T/skip$brief" &&
        ok "skipped GPU tests fail the step (exit 3, --gtest_brief=$brief)" || bad "skip rule, brief $brief: exit $rc"
    done
    grep -q "^\[  SKIPPED \] GpuPool\." "$T/skip0" && ok "the skipped tests are named" || bad "skipped tests not named"
  fi
  "${NOSKIP[@]}" --gtest_brief=1 --gtest_filter='PpLayout.*' >"$T/pass" 2>&1
  [ $? -eq 0 ] && ok "passing tests: exit 0" || bad "passing tests"
  "${NOSKIP[@]}" --gtest_filter='NoSuchSuite.*' >"$T/none" 2>&1
  [ $? -eq 4 ] && grep -q "matched no test" "$T/none" && ok "a filter matching nothing: exit 4" || bad "empty filter"
fi
echo "gpu_procedure: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
