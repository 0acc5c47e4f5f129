#!/usr/bin/env bash
# auto_layout.sh — `--distributed-mode auto --prefer` from the command line (planner/auto_layout.h):
# `mpirun -np 2 spikemesh train --distributed-mode auto --prefer memory` calibrates (machine and
# model, into --calibration), prints the ranking, the pick and why, trains with the pick, and
# records the concrete layout in config.toml; a second run reads the file instead of measuring;
# an explicit mode plus --prefer fills only what was not given (a pipeline: with the partition
# its prediction is for); `spikemesh calibrate`, `plan
# --prefer` (with --predictions) and `bench --distributed-mode auto` (the record's
# recommendation); bad input — an unknown preference, --prefer on one rank, nothing left to
# fill, a file that is not a calibration file, a foreign machine's file (measured again) — one
# message and a non-zero exit on every rank.
# Usage: tests/e2e/auto_layout.sh [path/to/spikemesh]; last line "auto_layout: N passed, M failed".
E2E_NAME=auto_layout
. "$(dirname "$0")/lib/common.sh"
[ $# -ge 1 ] && BIN=$(realpath "$1")
MPI=(timeout 300 mpirun --bind-to none --oversubscribe)
CAL="$TMP/cal.json"
fmnist_h5 "$TMP/fm.h5"
BASE=(train --model fmnist_csnn --var C=4 --T 2 --data "$TMP/fm.h5" --batch-size 4 --max-steps 2 --output "$TMP/runs"
      --log-every 1)
TRAIN=("${BASE[@]}" --calibration "$CAL")

# 1. auto + memory: calibrates, explains, trains with the pick; config.toml holds the pick
out=$("${MPI[@]}" -np 2 "$BIN" "${TRAIN[@]}" --run-name a --distributed-mode auto --prefer memory 2>&1); rc=$?
chosen=$(grep -o 'chosen: [a-z_]* [0-9x]*' <<<"$out" | head -1 | awk '{print $2}')
if [ $rc -eq 0 ] && grep -q "machine measured now" <<<"$out" && grep -q "memory: the smallest predicted peak" <<<"$out" &&
   grep -q "SpikingJelly's rule would pick" <<<"$out" && [ -s "$CAL" ] && [ -n "$chosen" ] &&
   grep -q "^distributed-mode = '$chosen'" "$TMP/runs/a/config.toml"; then
  ok "train --distributed-mode auto --prefer memory: calibrated, explained, trained with '$chosen' (config.toml)"
else
  bad "auto --prefer memory (rc $rc, chosen '$chosen'): $(tail -5 <<<"$out")"
fi
[ $(grep -c "auto layout" <<<"$out") -eq 1 ] && ok "the report is printed once (rank 0)" || bad "report printed $(grep -c "auto layout" <<<"$out") times"

# 2. the second run reads the file
out=$("${MPI[@]}" -np 2 "$BIN" "${TRAIN[@]}" --run-name b --distributed-mode auto 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "calibration and model profile from $CAL" <<<"$out" && grep -q "chosen: .* speed: the fastest" <<<"$out"; then
  ok "a second run reads the calibration (nothing measured), --prefer defaults to speed"
else
  bad "second run (rc $rc): $(grep -i 'auto layout\|error' <<<"$out" | head -3)"
fi

# 3. an explicit mode plus --prefer fills only the rest
out=$("${MPI[@]}" -np 2 "$BIN" "${TRAIN[@]}" --run-name c --distributed-mode dp --prefer memory 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "chosen: dp 2x1x1" <<<"$out" && ! grep -q "^  [0-9] *\(tp\|pp\|fsdp\)" <<<"$out"; then
  ok "--distributed-mode dp --prefer memory: only dp layouts ranked ($(grep -o 'chosen: [^—]*' <<<"$out"))"
else
  bad "dp + --prefer (rc $rc): $(grep 'chosen\|error\|^  [0-9]' <<<"$out" | head -6)"
fi

# 3b. a pipeline pick runs the partition its prediction is for (--pp-layout, in config.toml)
out=$("${MPI[@]}" -np 2 "$BIN" "${TRAIN[@]}" --run-name p --distributed-mode pp --prefer speed 2>&1); rc=$?
stages=$(grep -o 'chosen: pp [^(]*(stages [0-9|]*)' <<<"$out" | grep -o '[0-9|]*)$' | tr -d ')')
if [ $rc -eq 0 ] && [ -n "$stages" ] && grep -q "^pp-layout = '$stages'" "$TMP/runs/p/config.toml"; then
  ok "--distributed-mode pp --prefer speed: trained on the predicted partition ($stages)"
else
  bad "pp + --prefer (rc $rc, stages '$stages'): $(grep 'chosen\|error' <<<"$out" | head -3; grep pp-layout "$TMP/runs/p/config.toml")"
fi

# 4. plan --prefer capacity with every prediction as JSON lines; calibrate
out=$("${MPI[@]}" -np 2 "$BIN" plan --model fmnist_csnn --var C=4 --T 2 --batch-size 4 --prefer capacity \
      --calibration "$CAL" --predictions "$TMP/pred.jsonl" --device cpu 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "capacity: the largest global batch" <<<"$out" &&
   "$PY" -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert len(r) >= 4 and sum(x["chosen"] for x in r) == 1 and all(x["predicted_peak_mb"] > 0 for x in r)' "$TMP/pred.jsonl"; then
  ok "plan --prefer capacity ranks $(wc -l <"$TMP/pred.jsonl") layouts, --predictions as JSON lines"
else
  bad "plan --prefer (rc $rc): $(tail -3 <<<"$out")"
fi
out=$("${MPI[@]}" -np 2 "$BIN" calibrate --calibration "$TMP/cal2.json" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "all_reduce *2" <<<"$out" && grep -q "optimizer (adam)" <<<"$out" && [ -s "$TMP/cal2.json" ]; then
  ok "spikemesh calibrate: links per group size, the optimizer, the file"
else
  bad "calibrate (rc $rc): $(tail -3 <<<"$out")"
fi

# 5. bench --distributed-mode auto: the record's recommendation
out=$("${MPI[@]}" -np 2 "$BIN" bench --model fmnist_csnn --var C=4 --T 2 --batch-size 2 --steps 1 --warmup 0 --device cpu \
      --distributed-mode auto --prefer speed --calibration "$CAL" --json 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q '"recommendation":{"mode":"[a-z_]* 2x\|"recommendation":{"mode":"[a-z_]* 1x' <<<"$out" &&
   grep -q '"predicted_step_ms"' <<<"$out"; then
  ok "bench --distributed-mode auto records the pick, its reason and prediction"
else
  bad "bench auto (rc $rc): $(grep -o '"recommendation":{[^}]*}' <<<"$out"; tail -2 <<<"$out")"
fi

# 6. bad input: one message, non-zero on every rank
expect_error() {  # LABEL MESSAGE ARGS...
  local label=$1 msg=$2; shift 2
  local o rc
  o=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c "spikemesh: error:.*$msg" <<<"$o")" -eq 1 ]; then ok "$label"; else bad "$label (rc $rc): $(tail -3 <<<"$o")"; fi
}
expect_error "--prefer fast" "--prefer must be speed, memory or capacity, got 'fast'" \
  "${MPI[@]}" -np 2 "$BIN" "${TRAIN[@]}" --run-name e1 --distributed-mode auto --prefer fast
expect_error "--prefer on one rank with mode none" "--prefer speed with --distributed-mode none" \
  "$BIN" "${TRAIN[@]}" --run-name e2 --prefer speed
expect_error "nothing left to fill" "nothing left to choose" \
  "${MPI[@]}" -np 2 "$BIN" "${TRAIN[@]}" --run-name e3 --distributed-mode dp --prefer speed --mesh-shape 2 1 1 \
  --optimizer-sharding zero --memopt-level 0
echo "not a calibration" >"$TMP/bad.json"
expect_error "a file that is not a calibration file" "calibration file $TMP/bad.json cannot be read" \
  "${MPI[@]}" -np 2 "$BIN" "${BASE[@]}" --run-name e4 --distributed-mode auto --calibration "$TMP/bad.json"
"$PY" - "$CAL" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["fingerprint"] = "cpu=a machine elsewhere"; json.dump(c, open(sys.argv[1], "w"))
PYEOF
out=$("${MPI[@]}" -np 2 "$BIN" "${TRAIN[@]}" --run-name f --distributed-mode auto 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "was measured on 'cpu=a machine elsewhere'; this job is '.*': measured again" <<<"$out" &&
   ! grep -q "a machine elsewhere" "$CAL"; then
  ok "a foreign machine's calibration is measured again and replaced"
else
  bad "foreign calibration (rc $rc): $(grep 'auto layout\|error' <<<"$out" | head -2)"
fi

echo "auto_layout: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
