#!/usr/bin/env bash
# soak_short.sh — the short version of `make soak` (tests/soak/soak.sh) in make test: 3000 steps
# of a tiny fmnist_csnn with an evaluation every 32 steps and a checkpoint every 300; open file
# descriptors and threads at the end equal those at step 1000, the allocator's peak within 0.25 MB
# and the resident set within 4 MB of them.
# Usage: BIN=build/bin/spikemesh tests/e2e/soak_short.sh
E2E_NAME=soak_short
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
if BIN="$BIN" PY="$PY" bash "$ROOT/tests/soak/soak.sh" 3000 1000 4 >"$TMP/soak.log" 2>&1; then
  ok "3000 steps: nothing grows after step 1000 ($(grep -c '^  ok' "$TMP/soak.log") checks)"
else bad "soak"; tail -n 14 "$TMP/soak.log" | sed 's/^/       /'; fi
echo "soak_short: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
