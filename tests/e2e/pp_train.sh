#!/usr/bin/env bash
# pp_train.sh — pipeline parallelism from the command line, on a synthetic CIFAR10-DVS-shaped
# dataset (cifar10dvs_vgg's 10 units at 1/8 width, T 2, global batch 8 in 4 microbatches, fp64,
# --sync-bn):
#   * `mpirun -np 2 train --mesh-shape 1 1 2 --distributed-mode pp` with 1f1b and zero_bubble
#     (2 virtual stages) reproduces one rank's run with --grad-accum 4 (losses, evaluation);
#     --pp-transport channels (one-way channel comms) gives the staged route's losses;
#   * its pipeline.h5 holds the measured and simulated timelines; scripts/plot_pipeline.py
#     draws them; `spikemesh ckpt info` shows the layout;
#   * the pp 2 checkpoint resumes at pp 1 and at pp 4 (oversubscribed) on the uninterrupted
#     one-rank trajectory;
#   * `spikemesh bench --distributed-mode pp` records the pp_* fields, and the spikes leaving the
#     first stage travel at 1 bit per element (from the runtime's byte counters);
#   * SIGUSR1 stops every pipeline rank at one step with a checkpoint, exit 0;
#   * bad pipeline settings give one message naming the flag and a non-zero exit, also when a
#     schedule file is missing or different on one rank.
E2E_NAME=pp_train
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP"
"$BIN" data synth-dvs --out dvs.h5 --T 2 --train 64 --test 16 >/dev/null 2>&1 || { bad "synth-dvs"; exit 1; }
# The training runs use cifar10dvs_vgg's structure (the same 10 units, layers and 48x48 input)
# at 1/8 of its width, written from the built-in spec: every equality below holds at any width,
# and the narrow model trains many times faster. The refusals and the bench record use the built-in model.
"$PY" - "$ROOT/input/models/cifar10dvs_vgg.toml" vgg_narrow.toml <<'PYEOF' || { bad "narrow spec"; exit 1; }
import re, sys
src = open(sys.argv[1]).read()
def narrow(m):  # every width / 8, except the 2 event polarities in
    key, val = m.group(1), int(m.group(2))
    return m.group(0) if (key, val) == ("in_channels", 2) else f"{key} = {val // 8}"
out, n = re.subn(r"\b(in_channels|out_channels|num_features|in_features) = (\d+)", narrow, src)
assert n == 8 * 3 + 1 and 'in_features = 576,' in out, n  # 8 conv + 8 BN + 8 conv-in, the linear 64*3*3
open(sys.argv[2], "w").write(out.replace('name = "cifar10dvs_vgg"', 'name = "cifar10dvs_vgg_narrow"', 1))
PYEOF
BASE=(--data dvs.h5 --T 2 --global-batch-size 8 --precision fp64 --sync-bn --seed 3 --output out
      --eval-batch-size 16 --log-every 1)
COMMON=(--model-spec vgg_narrow.toml "${BASE[@]}")
REFUSE=(--model cifar10dvs_vgg "${BASE[@]}")
MPI=(timeout 300 mpirun --bind-to none --oversubscribe)
same_losses() {  # same_losses REF RUN [FIRST_STEP]: RUN's step losses (and eval) equal REF's at the same steps
  "$PY" - "$@" <<'PYEOF'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
ra = dict(zip(a["step/step"][:], a["step/loss"][:]))
rb = dict(zip(b["step/step"][:], b["step/loss"][:]))
assert rb and all(s in ra for s in rb), (sorted(ra), sorted(rb))
for s, v in rb.items():
    u = ra[s]
    assert abs(u - v) <= 1e-9 * max(abs(u), abs(v), 1e-30), (s, u, v)
if "eval/loss" in b and len(b["eval/loss"]):
    assert abs(a["eval/loss"][-1] - b["eval/loss"][-1]) <= 1e-9 * abs(a["eval/loss"][-1]), "eval"
PYEOF
}
timeout 300 "$BIN" train "${COMMON[@]}" --max-steps 6 --grad-accum 4 --run-name one >one.log 2>&1 && ok "one rank trains" || { bad "one rank"; tail -5 one.log; }
timeout 300 "$BIN" train "${COMMON[@]}" --max-steps 3 --grad-accum 4 --run-name one3 >one3.log 2>&1 || bad "one rank, 3 steps"
for sched in "1f1b 1" "zero_bubble 2"; do
  set -- $sched
  if "${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --max-steps 3 --run-name "pp_$1" --mesh-shape 1 1 2 \
       --distributed-mode pp --pp-microbatches 4 --pp-schedule "$1" --pp-virtual-stages "$2" >"pp_$1.log" 2>&1; then
    if same_losses out/one3/metrics.h5 "out/pp_$1/metrics.h5"; then ok "pp 2 $1 (v$2) = one rank accumulating the same microbatches"
    else bad "pp 2 $1 trajectory"; fi
  else bad "pp 2 $1 train exits 0"; tail -5 "pp_$1.log"; fi
done
# --pp-transport channels: the one-way channel plumbing (MPI, host buffers on the CPU) gives the
# staged route's trajectory; the pipeline flags without a pipeline, and a bad route, are refused.
if "${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --max-steps 3 --run-name pp_chan --mesh-shape 1 1 2 \
     --distributed-mode pp --pp-microbatches 4 --pp-schedule 1f1b --pp-transport channels >pp_chan.log 2>&1 &&
   same_losses out/pp_1f1b/metrics.h5 out/pp_chan/metrics.h5; then ok "pp 2 --pp-transport channels = the staged route"
else bad "pp 2 --pp-transport channels"; tail -5 pp_chan.log; fi
if ! timeout 60 "$BIN" train "${COMMON[@]}" --max-steps 1 --run-name nopp --pp-transport staged >nopp.log 2>&1 &&
   grep -q "pp-transport need a pipeline size > 1" nopp.log; then ok "--pp-transport without a pipeline is refused"
else bad "--pp-transport without pp"; tail -3 nopp.log; fi
if "$PY" - out/pp_zero_bubble/pipeline.h5 <<'PYEOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["schedule"] == "zero_bubble" and f.attrs["ranks"] == 2 and f.attrs["microbatches"] == 4
n = len(f["measured/kind"])
# 3 steps of 4 logical stages x 4 microbatches x (F, B, W), and per microbatch 3 stage boundaries
# x 2 directions x (send, receive)
assert n == 3 * (4 * 4 * 3 + 4 * 3 * 2 * 2), n
assert set(f["measured/rank"][:]) == {0, 1}
assert 0 <= f.attrs["measured_bubble"] < 1 and 0 <= f.attrs["simulated_bubble"] < 1
assert len(f["simulated/kind"]) > 0
PYEOF
then ok "pipeline.h5: measured and simulated timelines"; else bad "pipeline.h5 contents"; fi
if "$PY" - out/pp_1f1b/metrics.h5 <<'PYEOF'
import sys, h5py
s = h5py.File(sys.argv[1], "r")["step"]
# the stages' activations and gradients travel on the pp communicator: counted in comm_mb
assert (s["comm_mb"][:] > 0).all() and (s["comm_ms"][:] >= 0).all(), (s["comm_mb"][:], s["comm_ms"][:])
PYEOF
then ok "metrics.h5: comm_mb counts the pipeline's messages"; else bad "metrics.h5 comm_mb under pp"; fi
if "$PY" "$ROOT/scripts/plot_pipeline.py" out/pp_zero_bubble --out pp.png >plot.log 2>&1 && [ -s pp.png ]; then
  ok "plot_pipeline.py draws the timeline"; else bad "plot_pipeline.py"; cat plot.log; fi
if "$BIN" ckpt info out/pp_1f1b/ckpt_000000003.h5 2>&1 | grep -q "pp=2 none pp:1f1b v1 m4"; then ok "ckpt info shows the pipeline layout"
else bad "ckpt info layout"; "$BIN" ckpt info out/pp_1f1b/ckpt_000000003.h5 | head; fi

# ---- the pp 2 checkpoint resumes at pp 1 and pp 4 --------------------------------------------
CK=out/pp_1f1b/ckpt_000000003.h5
if timeout 300 "$BIN" train "${COMMON[@]}" --max-steps 6 --grad-accum 4 --run-name to1 --resume "$CK" >to1.log 2>&1 &&
   same_losses out/one/metrics.h5 out/to1/metrics.h5; then ok "pp 2 checkpoint resumes on one rank on the same trajectory"
else bad "pp 2 -> one rank"; tail -3 to1.log; fi
if "${MPI[@]}" -np 4 "$BIN" train "${COMMON[@]}" --max-steps 6 --run-name to4 --mesh-shape 1 1 4 --distributed-mode pp \
     --pp-microbatches 4 --resume "$CK" >to4.log 2>&1 && same_losses out/one/metrics.h5 out/to4/metrics.h5; then
  ok "pp 2 checkpoint resumes at pp 4 on the same trajectory"
else bad "pp 2 -> pp 4"; tail -3 to4.log; fi

# ---- bench: pp record fields, spikes at 1 bit per element ---------------------------------------
if "${MPI[@]}" -np 2 "$BIN" bench --model cifar10dvs_vgg --T 2 --batch-size 4 --steps 2 --warmup 1 --distributed-mode pp \
     --mesh-shape 1 1 2 --pp-schedule 1f1b --pp-microbatches 2 --pp-layout "1|9" --json >bench.log 2>&1; then
  if "$PY" - bench.log <<'PYEOF'
import sys, json
rec = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
for k in ("pp_schedule", "pp_microbatches", "pp_virtual_stages", "pp_layout", "pp_bubble_measured", "pp_bubble_simulated"):
    assert k in rec and rec[k] is not None, k
assert rec["pp_schedule"] == "1f1b" and rec["pp_microbatches"] == 2 and rec["pp_layout"] == "1|9"
assert rec["pp_delay_wgrad"] is False, rec["pp_delay_wgrad"]
assert rec["pp_transfer_path"] == "staged", rec["pp_transfer_path"]  # the CPU: host buffers over MPI
# stage 0 = features.0 (conv, BN, LIF): its [T 2, 2, 64, 48, 48] spikes per microbatch at 1 bit each
n = 2 * 2 * 64 * 48 * 48
assert rec["pp_spike_elements_per_step"] == 2 * n, rec["pp_spike_elements_per_step"]
assert rec["pp_activation_bytes_per_step"] == 2 * n / 8, rec["pp_activation_bytes_per_step"]
PYEOF
  then ok "bench pp: record fields, spikes sent at 1 bit per element"; else bad "bench pp record"; tail -3 bench.log; fi
else bad "bench pp exits 0"; tail -5 bench.log; fi

# ---- SIGUSR1 to mpirun: every pipeline rank stops at the same step, checkpoints, exit 0 --------
mpirun --bind-to none --oversubscribe -np 2 "$BIN" train "${COMMON[@]}" --epochs 400 --run-name sig --mesh-shape 1 1 2 \
  --distributed-mode pp --pp-microbatches 2 --pp-timeline-steps 0 >sig.log 2>&1 &
PID=$!
for _ in $(seq 1 1200); do
  grep -q "step 1/" out/sig/log.txt 2>/dev/null && break
  sleep 0.1
done
kill -USR1 "$PID" 2>/dev/null
for _ in $(seq 1 600); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID"; sleep 2; kill -KILL "$PID" 2>/dev/null; fi
wait "$PID"
RC=$?
CK=$(ls out/sig/ckpt_*.h5 2>/dev/null | tail -n 1)
if [ "$RC" -eq 0 ] && [ -n "$CK" ] && grep -q "stop requested" out/sig/log.txt; then
  ok "SIGUSR1 under mpirun (pp 2): checkpoint at a common step, exit 0"
else bad "SIGUSR1 under mpirun (pp 2): exit $RC, checkpoint '${CK}'"; tail -3 sig.log; fi

# ---- bad input: one message naming the flag, non-zero exit on every rank -------------------------
expect_error() {  # expect_error PATTERN NP ARGS... (on the built-in model; ARGS replace --global-batch-size 8 when they set it)
  local pat="$1" np="$2" t0; shift 2
  local args=() skip=0 a
  for a in "${REFUSE[@]}"; do  # drop REFUSE's --global-batch-size when ARGS set their own
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    if [ "$a" = --global-batch-size ] && [[ " $* " == *" --global-batch-size "* ]]; then skip=1; continue; fi
    args+=("$a")
  done
  t0=$(date +%s)
  if "${MPI[@]}" -np "$np" "$BIN" train "${args[@]}" --max-steps 1 --run-name err "$@" >err.log 2>&1; then
    bad "accepted: $*"
  elif [ "$(grep -c '^spikemesh: error:' err.log)" -ne 1 ]; then bad "not exactly one message for $*"; cat err.log
  elif ! grep '^spikemesh: error:' err.log | grep -q -- "$pat"; then bad "message for $*"; tail -3 err.log
  elif [ $(( $(date +%s) - t0 )) -gt 30 ]; then bad "refused only after $(( $(date +%s) - t0 )) s: $*"
  else ok "refused: $* ($pat)"; fi
}
expect_error "FSDP is not combined with pipeline" 2 --mesh-shape 1 1 2 --distributed-mode fsdp
expect_error "zero2 with pp" 2 --mesh-shape 1 1 2 --distributed-mode pp --optimizer-sharding zero2
expect_error "needs a pipeline size > 1" 2 --mesh-shape 2 1 1 --distributed-mode pp
expect_error "--pp-layout" 2 --mesh-shape 1 1 2 --distributed-mode pp --pp-layout "3|3"
expect_error 'has 3 entries, but the pipeline has 2 logical stages' 2 --mesh-shape 1 1 2 --distributed-mode pp \
  --pp-layout "5|4|1"
expect_error "entry 1 '-1' is not a non-negative integer" 2 --mesh-shape 1 1 2 --distributed-mode pp --pp-layout "-1|11"
expect_error "--pp-microbatches 1 is fewer than the 2 logical pipeline stages" 2 --mesh-shape 1 1 2 \
  --distributed-mode pp --pp-microbatches 1
expect_error "interleaved needs --pp-virtual-stages 2 or more" 2 --mesh-shape 1 1 2 --distributed-mode pp \
  --pp-schedule interleaved
expect_error "1f1b needs --pp-virtual-stages 1" 2 --mesh-shape 1 1 2 --distributed-mode pp --pp-schedule 1f1b \
  --pp-virtual-stages 2
expect_error "12 logical stages (pp 2 x --pp-virtual-stages 6) but model 'cifar10dvs_vgg' has only 10 units" 2 \
  --mesh-shape 1 1 2 --distributed-mode pp --pp-virtual-stages 6 --pp-schedule interleaved --pp-microbatches 12 \
  --global-batch-size 24
expect_error "gpipe" 2 --mesh-shape 1 1 2 --distributed-mode pp --pp-schedule gpipe --pp-delay-wgrad
expect_error "--pp-delay-wgrad with --pp-schedule 1f1b" 2 --mesh-shape 1 1 2 --distributed-mode pp \
  --pp-schedule 1f1b --pp-delay-wgrad
expect_error "--pp-microbatches 3 does not divide" 2 --mesh-shape 1 1 2 --distributed-mode pp --pp-microbatches 3
printf '0F0 0SF0\n1RF0 1F0 1XB0\n' > bad.pp
expect_error "bad.pp:2: action '1XB0': unknown action 'XB'" 2 --mesh-shape 1 1 2 --distributed-mode pp \
  --pp-schedule-file bad.pp
# A schedule file that one rank cannot read, or reads differently (other node, other copy): one
# message naming the file, every rank exits non-zero within seconds (MPMD: one working directory
# per rank).
mkdir -p nodeA nodeB
printf '%s\n' "0F0 0SF0 0F1 0SF1 0F2 0SF2 0F3 0SF3 0RB0 0BW0 0RB1 0BW1 0RB2 0BW2 0RB3 0BW3" \
  "1RF0 1F0 1BW0 1SB0 1RF1 1F1 1BW1 1SB1 1RF2 1F2 1BW2 1SB2 1RF3 1F3 1BW3 1SB3" >nodeA/s.pp
printf '%s\n' "0F0 0SF0 0F1 0SF1 0F2 0SF2 0F3 0SF3 0RB0 0BW0 0RB1 0BW1 0RB2 0BW2 0RB3 0BW3" \
  "1RF0 1F0 1RF1 1F1 1RF2 1F2 1RF3 1F3 1BW0 1SB0 1BW1 1SB1 1BW2 1SB2 1BW3 1SB3" >nodeB/s.pp
ABS=(train --model cifar10dvs_vgg --data "$TMP/dvs.h5" --T 2 --global-batch-size 8 --seed 3 --output "$TMP/out"
     --max-steps 1 --run-name mpmd --mesh-shape 1 1 2 --distributed-mode pp --pp-microbatches 4
     --pp-schedule-file s.pp --comm-timeout 60)
for case in "missing:cannot open" "differ:disagree on --pp-schedule-file"; do
  name="${case%%:*}"; pat="${case#*:}"
  [ "$name" = missing ] && mv nodeB/s.pp nodeB/s.off
  [ "$name" = differ ] && mv nodeB/s.off nodeB/s.pp
  T0=$(date +%s)
  if timeout 120 mpirun --bind-to none -np 1 --wdir "$TMP/nodeA" "$BIN" "${ABS[@]}" : \
       -np 1 --wdir "$TMP/nodeB" "$BIN" "${ABS[@]}" >mpmd.log 2>&1; then bad "schedule file $name on one rank: accepted"
  elif [ "$(grep -c '^spikemesh: error:' mpmd.log)" -ne 1 ] || ! grep '^spikemesh: error:' mpmd.log | grep -q "$pat"; then
    bad "schedule file $name on one rank: message"; cat mpmd.log
  elif [ $(( $(date +%s) - T0 )) -gt 30 ]; then bad "schedule file $name on one rank: took $(( $(date +%s) - T0 )) s"
  else ok "schedule file $name on one rank: one message ($pat), non-zero exit, no hang"; fi
done

echo "pp_train: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
