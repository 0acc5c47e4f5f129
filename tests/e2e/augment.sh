#!/usr/bin/env bash
# augment.sh — `--augment`: every step re-derived by the independent numpy reference
# (tests/ref/augment_ref.py: Philox, the draws, the geometry, mixing and soft targets) on event
# frames and static images through `spikemesh data augment`; training with augmentation gives
# the one-rank trajectory under dp 2, pp 2 and tp 2 (fp64, 1e-9) and continues it exactly after
# a resume; it changes the trajectory against no augmentation; bad specs are refused with one
# message naming --augment. ~2 min.
E2E_NAME=augment
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP"
REF=("$PY" "$ROOT/tests/ref/augment_ref.py")
"$BIN" data synth-dvs --out dvs.h5 --T 4 --size 16 --train 48 --test 16 >/dev/null 2>&1 || { bad "synth-dvs"; exit 1; }
fmnist_h5 img.h5 || { bad "fmnist-like data"; exit 1; }
"${REF[@]}" selftest >/dev/null && ok "the reference's Philox equals Random123's known answers" || bad "augment_ref selftest"

# ---- every step against the reference ---------------------------------------------------------
EVENTS="hflip:0.5,vflip:0.3,translate:0.5:3,roll:0.5:4,rotate:0.6:30,cutout:0.5:6,timeshift:0.5:1,jitter:0.4:2,dropevent:0.5:0.25,mixup:0.3:0.4,cutmix:0.5:1"
for epoch in 0 3; do
  if "$BIN" data augment --data dvs.h5 --augment "$EVENTS" --seed 5 --epoch "$epoch" --count 48 --out ev$epoch.h5 \
       >/dev/null 2>&1 && "${REF[@]}" check ev$epoch.h5 --stats >ref$epoch.log 2>&1; then
    ok "event frames, epoch $epoch: every step, partner and soft target equal the reference ($(tail -1 ref$epoch.log | sed 's/.*fired/fired/'))"
  else bad "event frames, epoch $epoch"; tail -5 ref$epoch.log; fi
done
"$PY" - ev0.h5 ev3.h5 <<'PYEOF' && ok "another epoch draws differently" || bad "epochs 0 and 3 drew the same"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
sys.exit(0 if not np.array_equal(a["x"][...], b["x"][...]) else 1)
PYEOF
IMAGES="hflip:0.5,translate:0.5:4,rotate:0.5:15,cutout:0.5:8,mixup:0.5:0.8"
if "$BIN" data augment --data img.h5 --augment "$IMAGES" --count 32 --out img_aug.h5 >/dev/null 2>&1 &&
   "${REF[@]}" check img_aug.h5 >refimg.log 2>&1; then ok "static images: equal to the reference"
else bad "static images"; tail -5 refimg.log; fi

# ---- frames made on the fly (non-square N-Caltech101 frames) with augmentation -------------------
if "$PY" "$ROOT/tests/ref/events_ref.py" gen n-caltech101 ncal --per-class 3 --seed 2 >/dev/null &&
   "$BIN" data n-caltech101 --from ncal --out ncal.h5 --T 3 --train-ratio 0.7 --events >/dev/null 2>&1 &&
   "$BIN" data augment --data ncal.h5 --frames 3,number --augment "hflip,roll:0.5:7,rotate:0.5:20,dropevent:0.5:0.3,cutmix:0.5:1" \
     --count 8 --out ncal_aug.h5 >/dev/null 2>&1 && "${REF[@]}" check ncal_aug.h5 >refncal.log 2>&1; then
  ok "--frames with --augment on 180x240 frames: the dataset's rows, then equal to the reference"
else bad "--frames with --augment on N-Caltech101 frames"; tail -5 refncal.log; fi

# ---- training: the one-rank trajectory under every layout, resume, a real change -----------------
cp "$ROOT/tests/e2e/lib/tiny_dvs.toml" tiny.toml
AUG="hflip,roll:0.5:2,rotate:0.5:10,cutout:0.5:4,timeshift:0.5:1,dropevent:0.3:0.2,cutmix:0.4:1,mixup:0.4:0.8"
TRAIN=(train --model-spec tiny.toml --data dvs.h5 --precision fp64 --sync-bn --seed 3 --output out --log-every 100
       --global-batch-size 8 --lr 0.01 --eval-batch-size 16)
MPI=(timeout 300 mpirun --bind-to none --oversubscribe -np 2)
run_losses() { same_losses "out/$1/metrics.h5" "out/$2/metrics.h5" "${@:3}"; }  # run names under out/
timeout 300 "$BIN" "${TRAIN[@]}" --augment "$AUG" --max-steps 6 --run-name one >one.log 2>&1 &&
  grep -q "augment hflip:0.5,roll:0.5:2" out/one/log.txt && ok "one rank trains with --augment (the log names the steps)" ||
  { bad "one rank with --augment"; tail -5 one.log; }
timeout 300 "$BIN" "${TRAIN[@]}" --max-steps 6 --run-name plain >plain.log 2>&1 || bad "one rank without --augment"
if run_losses plain one --differ; then
  ok "augmentation changes the trajectory"
else bad "augmented losses equal the plain run's (or a run failed)"; fi
# a pipeline's 2 microbatches are the one-rank run accumulating 2 (batch norm sees 4 samples)
timeout 300 "$BIN" "${TRAIN[@]}" --augment "$AUG" --max-steps 6 --grad-accum 2 --run-name one_acc >one_acc.log 2>&1 ||
  bad "one rank with --augment --grad-accum 2"
for layout in "dp:one:--distributed-mode dp" "pp:one_acc:--mesh-shape 1 1 2 --distributed-mode pp --pp-microbatches 2" \
              "tp:one:--mesh-shape 1 2 1 --distributed-mode dp"; do
  name=${layout%%:*} rest=${layout#*:}
  # shellcheck disable=SC2086
  if "${MPI[@]}" "$BIN" "${TRAIN[@]}" --augment "$AUG" --max-steps 6 --run-name "$name" ${rest#*:} >"$name.log" 2>&1 &&
     run_losses "${rest%%:*}" "$name"; then ok "$name 2 with --augment = one rank (fp64, 1e-9)"
  else bad "$name 2 with --augment"; tail -4 "$name.log"; fi
done
timeout 300 "$BIN" "${TRAIN[@]}" --augment "$AUG" --max-steps 3 --ckpt-every 3 --run-name res >res1.log 2>&1 &&
  timeout 300 "$BIN" "${TRAIN[@]}" --augment "$AUG" --max-steps 6 --run-name res --resume auto >res2.log 2>&1 &&
  run_losses one res --exact && ok "a resumed run continues the augmented trajectory bitwise" ||
  { bad "resume with --augment"; tail -4 res2.log; }

# ---- bad specs ----------------------------------------------------------------------------------
expect_error "unknown step" "--augment" "unknown step 'flip'" "hflip" -- "$BIN" "${TRAIN[@]}" --augment flip --run-name e1
expect_error "probability out of range" "--augment" "not in [0, 1]" -- "$BIN" "${TRAIN[@]}" --augment hflip:1.5 --run-name e2
expect_error "mixing not last" "--augment" "list mixup/cutmix last" -- "$BIN" "${TRAIN[@]}" --augment mixup,hflip --run-name e3
expect_error "fractional pixels" "--augment" "whole number" -- "$BIN" "${TRAIN[@]}" --augment roll:0.5:2.5 --run-name e4
expect_error "timeshift on static images" "--augment timeshift" "img.h5" "static images" -- \
  "$BIN" data augment --data img.h5 --augment timeshift --out x.h5
expect_error "dropevent on scaled images" "--augment dropevent" "img.h5" "integer event counts" -- \
  "$BIN" data augment --data img.h5 --augment dropevent --out x.h5
[ ! -e x.h5 ] && [ ! -e out/e1 ] && ok "nothing written by a refused spec" || bad "a refused spec left files"
echo "augment: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
