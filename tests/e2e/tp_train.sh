#!/usr/bin/env bash
# tp_train.sh — `spikemesh train` with tensor parallelism from the command line, on a
# synthetic CIFAR10-DVS-shaped dataset (cifar10dvs_vgg, T 2, global batch 4, 3 steps, fp64,
# --sync-bn): 4 oversubscribed ranks as dp 2 x tp 2 (`--distributed-mode dp --mesh-shape 2 2 1`)
# and as fsdp_tp reproduce the one-rank run's training losses and evaluation (relative 1e-9),
# and `spikemesh ckpt info` shows the layout the checkpoint was saved under. ~70 s.
E2E_NAME=tp_train
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP"
"$BIN" data synth-dvs --out dvs.h5 --T 2 --train 64 --test 16 >/dev/null 2>&1 || { bad "synth-dvs"; exit 1; }
COMMON=(--model cifar10dvs_vgg --data dvs.h5 --T 2 --global-batch-size 4 --max-steps 3 --precision fp64 --sync-bn
        --seed 3 --output out --eval-batch-size 16 --log-every 1)
timeout 300 "$BIN" train "${COMMON[@]}" --run-name one >one.log 2>&1 && ok "one rank trains" || { bad "one rank"; tail -5 one.log; }
for mode in dp fsdp_tp; do
  if timeout 300 mpirun --bind-to none --oversubscribe -np 4 "$BIN" train "${COMMON[@]}" --run-name "$mode" \
       --mesh-shape 2 2 1 --distributed-mode "$mode" >"$mode.log" 2>&1; then
    if "$PY" - out/one/metrics.h5 "out/$mode/metrics.h5" <<'PYEOF'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
for key in ("step/loss", "eval/loss", "eval/accuracy"):
    x, y = a[key][:], b[key][:]
    assert len(x) == len(y) and len(x) > 0, (key, len(x), len(y))
    for u, v in zip(x, y):
        assert abs(u - v) <= 1e-9 * max(abs(u), abs(v), 1e-30), (key, u, v)
PYEOF
    then ok "mpirun -np 4 train --mesh-shape 2 2 1 --distributed-mode $mode = one rank (losses, eval)"
    else bad "$mode trajectory"; fi
  else bad "$mode train exits 0"; tail -5 "$mode.log"; fi
done
if "$BIN" ckpt info out/fsdp_tp/ckpt_000000003.h5 2>&1 | grep -q "mesh dp=2 tp=2 pp=1 fsdp+tp"; then ok "ckpt info shows the layout"
else bad "ckpt info layout"; "$BIN" ckpt info out/fsdp_tp/ckpt_000000003.h5; fi
echo "tp_train: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
