#!/usr/bin/env bash
# recipes.sh — the training recipes of input/configs/ for event data (cifar10dvs_vgg_nda.toml,
# shd_ff.toml) run for a few steps on synthetic stand-ins of their datasets (synth-dvs 48x48,
# generated SHD-format files imported with `data shd`), in fp64: the recipe's augmentation
# changes the trajectory against the same recipe with `--augment none`, and data parallelism
# (dp 2, --sync-bn) still gives the one-rank losses within 1e-9. `make recipes-check` runs it
# alone. ~1.5 min.
E2E_NAME=recipes
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP"
export PYTHONPATH="$ROOT/tests/ref${PYTHONPATH:+:$PYTHONPATH}"
"$BIN" data synth-dvs --out dvs48.h5 --T 2 --size 48 --train 32 --test 8 >/dev/null 2>&1 || bad "synth-dvs 48x48"
"$PY" - <<'PYEOF' || bad "SHD-format files"
import os, numpy as np, spike_trains_ref as R
rng = np.random.default_rng(3)
os.makedirs("shd")
for s, n in (("train", 40), ("test", 10)):
    # dense enough on 64 of the 700 channels that shd_ff's hidden layers fire from the first step
    R.make_split(f"shd/shd_{s}.h5", n, 20, np.float16, rng, empty=False, channels=64, spikes=(3000, 5000))
PYEOF
"$BIN" data shd --from shd --out shd.h5 --T 4 --split-by number >/dev/null 2>&1 || bad "data shd"

run_losses() { same_losses "out/$1/metrics.h5" "out/$2/metrics.h5" "${@:3}"; }  # run names under out/
# recipe NAME CONFIG DATA GLOBAL_BATCH FLAGS...: one rank with and without the recipe's
# augmentation, and dp 2 with it
recipe() {
  local name=$1 file=$2 cfg=$ROOT/input/configs/$2 data=$3 gb=$4
  shift 4
  local run=(train --config "$cfg" --data "$data" --precision fp64 --sync-bn --max-steps 3 --ckpt-every 0
             --output out --log-every 100 --threads 1 "$@")
  timeout 600 "$BIN" "${run[@]}" --batch-size "$gb" --run-name "${name}_1" >"${name}_1.log" 2>&1 &&
    grep -q "augment " "out/${name}_1/log.txt" && ok "$file trains on its stand-in with its augmentation" ||
    { bad "$file one rank"; tail -4 "${name}_1.log"; }
  timeout 600 "$BIN" "${run[@]}" --batch-size "$gb" --augment none --run-name "${name}_none" >"${name}_none.log" 2>&1 &&
    run_losses "${name}_1" "${name}_none" --differ && ok "$file: its augmentation changes the trajectory" ||
    bad "$file: the same losses with --augment none"
  timeout 600 mpirun --bind-to none --oversubscribe -np 2 "$BIN" "${run[@]}" --distributed-mode dp \
    --batch-size $((gb / 2)) --run-name "${name}_dp" >"${name}_dp.log" 2>&1 &&
    run_losses "${name}_1" "${name}_dp" && ok "$file: dp 2 = one rank with augmentation (fp64, 1e-9)" ||
    { bad "$file dp 2"; tail -4 "${name}_dp.log"; }
}
recipe vgg cifar10dvs_vgg_nda.toml dvs48.h5 4 --T 2 --eval-batch-size 8
recipe shd shd_ff.toml shd.h5 8 --eval-batch-size 10
echo "recipes: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
