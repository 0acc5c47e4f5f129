#!/bin/bash
# multirank.sh — the multi-rank peer comparison: SpikingJelly's distributed helpers (dp, tp, pp
# on 2 ranks, CPU/gloo, bench/sj_distributed.py) beside spikemesh's own layouts (one rank,
# mpirun -np 2 dp with and without --sync-bn; tp and pp where spikemesh has them), all from
# identical initial weights (spikemesh's HDF5 state-dict export), the same synthetic data in
# the same order, Adam lr 1e-3, dropout 0, T 2, global batch 4. Records the losses of the first
# --steps steps and writes OUT/multirank.json (per system and layout: status ok | unavailable |
# failed, reason, losses, differences to the spikemesh reference) and OUT/multirank.md (a
# markdown section for a report). Every command runs under `timeout`.
#
#   bash bench/multirank.sh [--out DIR] [--steps K] [--precision fp64|fp32] [--seed S]
#                           [--timeout SEC] [--tol REL] [--keep-work]
#
# Scratch (data, exported weights, run directories, logs) goes to OUT/multirank_work; the
# exported weights and the checkpoints (hundreds of MB in fp64) are deleted at the end unless
# --keep-work. Defaults: OUT output/bench, 5 steps, fp64 (tolerance 1e-6 relative; fp32: 1e-3),
# seed 7, 300 s per command.
#
# Exit status: 0 when the spikemesh runs succeeded, whatever happened to SpikingJelly (a
# missing venv, an import error, a crash or a refusal is recorded in the json/md as such);
# non-zero when spikemesh itself fails (build missing, export, data, training) or the report
# cannot be written. Environment: SPIKEMESH (binary, default build/bin/spikemesh), BENCH_VENV
# (default .venv-bench), MPIRUN (default mpirun).
set -uo pipefail
CALLER_PWD=$PWD
cd "$(dirname "$0")/.."

OUT=output/bench
STEPS=5
PRECISION=fp64
SEED=7
TMO=300
TOL=""
KEEP=0
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while (($#)); do
    case $1 in
        --out) OUT=$(cd "$CALLER_PWD" && realpath -m -- "$2"); shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --precision) PRECISION=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        --timeout) TMO=$2; shift 2 ;;
        --tol) TOL=$2; shift 2 ;;
        --keep-work) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "multirank: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $PRECISION in fp64|fp32) ;; *) echo "multirank: --precision fp64 or fp32" >&2; exit 2 ;; esac
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || { echo "multirank: --steps must be a positive integer" >&2; exit 2; }
[[ -z $TOL ]] && { [[ $PRECISION == fp64 ]] && TOL=1e-6 || TOL=1e-3; }

SM=${SPIKEMESH:-build/bin/spikemesh}
VENV=${BENCH_VENV:-.venv-bench}
MPIRUN=${MPIRUN:-mpirun}
T=2                 # time steps (the dataset's)
GB=4                # global batch; dp ranks take 2 each
NTRAIN=$((GB * STEPS))
WORK=$OUT/multirank_work
MANIFEST=$WORK/manifest.tsv
START=$(date +%s)
export OMP_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE

log() { echo "multirank: $*" >&2; }
die() { log "$*"; exit 1; }

[[ -x $SM ]] || die "$SM not found: build spikemesh first (make)"
command -v timeout >/dev/null || die "coreutils 'timeout' not found"

# A Python with h5py + numpy for the batch file and the report: the venv's, else the system's.
PY=""
for cand in "$VENV/bin/python" /usr/bin/python3 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import h5py, numpy' 2>/dev/null; then PY=$cand; break; fi
done
[[ -n $PY ]] || die "no Python with h5py and numpy (make deps installs python3-h5py)"

mkdir -p "$OUT" || die "cannot create $OUT"
rm -rf "$WORK"
mkdir -p "$WORK/runs" "$WORK/logs" || die "cannot create $WORK"
printf 'key\tkind\trc\twall_s\tresult\tlog\tcmd\n' > "$MANIFEST"

# run KEY KIND RESULT CMD... — runs CMD under timeout, logs to logs/KEY.log, appends to the manifest.
run() {
    local key=$1 kind=$2 result=$3; shift 3
    local t0 ms rc
    log "$key: $*"
    t0=$(date +%s%N)
    timeout -k 10 "$TMO" "$@" > "$WORK/logs/$key.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    printf '%s\t%s\t%s\t%d.%d\t%s\t%s\t%s\n' "$key" "$kind" "$rc" $((ms / 1000)) $((ms % 1000 / 100)) "$result" \
        "$WORK/logs/$key.log" "$*" >> "$MANIFEST"
    [[ $KEEP == 0 && $kind == sm && $key != init_check && -d $result ]] && rm -f "$result"/ckpt_*.h5  # large
    ((rc == 124 || rc == 137)) && log "$key: timed out after $TMO s"
    ((rc != 0)) && log "$key: exit status $rc (log: $WORK/logs/$key.log)"
    return $rc
}

MPI=("$MPIRUN" -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS -x HDF5_USE_FILE_LOCKING)
[[ $(id -u) == 0 ]] && MPI+=(--allow-run-as-root)
TRAIN=(train --model cifar10dvs_vgg --data "$WORK/data.h5" --dropout 0 --no-shuffle --seed "$SEED"
       --optimizer adam --lr-schedule constant --weight-decay 0 --precision "$PRECISION"
       --device cpu --epochs 1 --log-every 1 --output "$WORK/runs")
STEP=(--lr 1e-3 --max-steps "$STEPS")

# (b) the shared data: CIFAR10-DVS-shaped synthetic events, T 2, read in file order by both.
run data sm "$WORK/data.h5" "$SM" data synth-dvs --out "$WORK/data.h5" --T $T --train $NTRAIN --test $GB \
    --seed "$SEED" || die "spikemesh data synth-dvs failed"
"$PY" - "$WORK/data.h5" "$WORK/batch0.h5" $GB <<'EOF' || die "cannot write the export batch"
import sys, h5py, numpy as np
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
    g["x"] = (f["train/x"][:n].astype(np.float64) * float(f.attrs.get("x_scale", 1.0))).astype(np.float32)
    g["y"] = f["train/y"][:n].astype(np.int64)
EOF

# (a) the initial weights, exported from spikemesh (HDF5 /params, /buffers), plus the check that
# `train --seed S` starts from exactly these: one step with lr 0 leaves them in its checkpoint.
run export sm "$WORK/init.h5" "$SM" dump-grads --model cifar10dvs_vgg --T $T --dropout 0 \
    --input "$WORK/batch0.h5" --out "$WORK/init.h5" --precision "$PRECISION" --seed "$SEED" --steps 0 \
    || die "spikemesh dump-grads (weight export) failed"
run init_check sm "$WORK/runs/init_check" "$SM" "${TRAIN[@]}" --lr 0 --max-steps 1 \
    --batch-size $GB --threads 2 --run-name init_check || die "spikemesh train (init check) failed"

# (c) spikemesh: one rank, dp=2 with per-rank BN (SpikingJelly's DDP semantics), dp=2 --sync-bn;
# tp=2 (reference: one rank) and pp=2 in 2 microbatches (reference: one rank with 2 micro-steps
# of half the batch, --grad-accum 2: batch norm per microbatch in both).
SM_FAIL=0
run sm_one sm "$WORK/runs/sm_one" "$SM" "${TRAIN[@]}" "${STEP[@]}" --batch-size $GB --threads 2 --run-name sm_one || SM_FAIL=1
run sm_dp sm "$WORK/runs/sm_dp" "${MPI[@]}" "$SM" "${TRAIN[@]}" "${STEP[@]}" --batch-size $((GB / 2)) --threads 1 \
    --distributed-mode dp --run-name sm_dp || SM_FAIL=1
run sm_dp_syncbn sm "$WORK/runs/sm_dp_syncbn" "${MPI[@]}" "$SM" "${TRAIN[@]}" "${STEP[@]}" --batch-size $((GB / 2)) \
    --threads 1 --distributed-mode dp --sync-bn --run-name sm_dp_syncbn || SM_FAIL=1
run sm_tp sm "$WORK/runs/sm_tp" "${MPI[@]}" "$SM" "${TRAIN[@]}" "${STEP[@]}" --batch-size $GB --threads 1 \
    --distributed-mode tp --mesh-shape 1 2 1 --run-name sm_tp || SM_FAIL=1
run sm_accum sm "$WORK/runs/sm_accum" "$SM" "${TRAIN[@]}" "${STEP[@]}" --batch-size $((GB / 2)) --grad-accum 2 \
    --threads 2 --run-name sm_accum || SM_FAIL=1
run sm_pp sm "$WORK/runs/sm_pp" "${MPI[@]}" "$SM" "${TRAIN[@]}" "${STEP[@]}" --batch-size $GB --threads 1 \
    --distributed-mode pp --mesh-shape 1 1 2 --pp-microbatches 2 --run-name sm_pp || SM_FAIL=1

# (d) SpikingJelly: one rank, then dp, tp, pp on 2 ranks (torchrun, gloo).
SJ_STATE=ok
if [[ ! -x $VENV/bin/python ]]; then
    SJ_STATE="unavailable: no benchmark venv ($VENV/bin/python is missing; make bench-deps creates it)"
elif ! "$VENV/bin/python" -c 'import spikingjelly.activation_based.distributed.vision, spikingjelly.activation_based.distributed.tensor_parallel' \
        > "$WORK/logs/sj_import.log" 2>&1; then
    SJ_STATE="unavailable: import spikingjelly.activation_based.distributed failed: $(grep -v -i triton "$WORK/logs/sj_import.log" | tail -1)"
elif [[ ! -x $VENV/bin/torchrun ]]; then
    SJ_STATE="unavailable: $VENV/bin/torchrun is missing"
fi
echo "$SJ_STATE" > "$WORK/sj_state.txt"
if [[ $SJ_STATE == ok ]]; then
    SJ_ARGS=(--init "$WORK/init.h5" --data "$WORK/data.h5" --steps "$STEPS" --global-batch $GB
             --precision "$PRECISION")
    run sj_one sj "$WORK/sj_one.json" "$VENV/bin/python" bench/sj_distributed.py --mode none --threads 2 \
        "${SJ_ARGS[@]}" --out "$WORK/sj_one.json"
    for m in dp tp pp; do
        run "sj_$m" sj "$WORK/sj_$m.json" "$VENV/bin/torchrun" --standalone --nproc-per-node 2 \
            bench/sj_distributed.py --mode $m --threads 1 "${SJ_ARGS[@]}" --out "$WORK/sj_$m.json"
    done
    # SpikingJelly's pipeline set-up as shipped can fail its first backward under this torch;
    # the same run with its stage example tensors marked requires_grad shows the pp numbers.
    if ! grep -q '"status": "ok"' "$WORK/sj_pp.json" 2>/dev/null; then
        run sj_pp_fix sj "$WORK/sj_pp_fix.json" "$VENV/bin/torchrun" --standalone --nproc-per-node 2 \
            bench/sj_distributed.py --mode pp --pp-variant requires-grad --no-probe --threads 1 \
            "${SJ_ARGS[@]}" --out "$WORK/sj_pp_fix.json"
    fi
fi

# (e) the report.
WALL=$(( $(date +%s) - START ))
"$PY" - "$WORK" "$OUT" "$PRECISION" "$STEPS" "$TOL" "$SEED" "$WALL" "$GB" "$T" "$SM" "$KEEP" <<'EOF'
import csv, datetime, glob, json, os, platform, re, socket, subprocess, sys
import h5py, numpy as np

work, out, precision, steps, tol, seed, wall, gb, T, sm_bin, keep = sys.argv[1:]
steps, tol, seed, wall, gb, T = int(steps), float(tol), int(seed), int(wall), int(gb), int(T)
runs = {r["key"]: r for r in csv.DictReader(open(f"{work}/manifest.tsv"), delimiter="\t")}
sj_state = open(f"{work}/sj_state.txt").read().strip()


def tail(path, n=3):
    try:
        lines = [l.rstrip() for l in open(path, errors="replace") if l.strip()]
    except OSError:
        return ""
    keep = [l for l in lines if not re.search(r"triton|^\s*warnings\.warn|FutureWarning|UserWarning", l, re.I)]
    return " | ".join((keep or lines)[-n:])[-600:] or "(no output)"


def sm_result(key):
    r = runs.get(key)
    if r is None:
        return dict(status="failed", reason="not run", losses=[])
    rc = int(r["rc"])
    res = dict(status="failed", reason=None, losses=[], wall_s=float(r["wall_s"]), command=r["cmd"])
    if rc in (124, 137):
        res["reason"] = f"timed out (exit {rc})"
        return res
    logtext = open(r["log"], errors="replace").read()
    m = re.search(r"spikemesh: error: (.*)", logtext)
    if rc != 0:
        if m and "not implemented yet" in m.group(1):
            res.update(status="unavailable", reason=m.group(1).strip())
        else:
            res["reason"] = (m.group(1).strip() if m else f"exit status {rc}: {tail(r['log'])}")
        return res
    try:
        with h5py.File(os.path.join(r["result"], "metrics.h5"), "r") as f:
            res["losses"] = [float(v) for v in f["step/loss"][()]]
    except Exception as e:  # noqa: BLE001
        res["reason"] = f"no metrics: {e}"
        return res
    res["status"] = "ok" if len(res["losses"]) == steps else "failed"
    if res["status"] != "ok":
        res["reason"] = f"{len(res['losses'])} steps recorded, {steps} expected"
    return res


def sj_result(key):
    if sj_state != "ok":
        return dict(status="unavailable", reason=sj_state, losses=[])
    r = runs.get(key)
    if r is None:
        return None
    rc = int(r["rc"])
    path = r["result"]
    res = None
    for p in [path] + sorted(glob.glob(path + ".rank*")):
        if os.path.exists(p):
            res = json.load(open(p))
            break
    if res is None:
        res = dict(status="failed", losses=[],
                   reason=(f"timed out after {r['wall_s']} s" if rc in (124, 137) else
                           f"exit status {rc}, no result written: {tail(r['log'])}"))
    elif rc in (124, 137) and res.get("status") == "ok":
        res.update(status="failed", reason="timed out")
    res["wall_s"] = float(r["wall_s"])
    res["command"] = r["cmd"]
    return res


def compare(losses, ref):
    if not losses or not ref or len(losses) != len(ref):
        return None
    a, b = np.array(losses), np.array(ref)
    d = np.abs(a - b)
    rel = d / np.maximum(np.abs(b), 1e-300)
    within = rel <= tol
    through = int(np.argmin(within)) if not within.all() else len(within)
    return dict(max_abs_diff=float(d.max()), max_rel_diff=float(rel.max()), agree=bool(within.all()),
                agree_through_step=through, rel_diff_per_step=[float(v) for v in rel])


# the initial-weight check
init = {}
try:
    with h5py.File(f"{work}/init.h5", "r") as a, \
         h5py.File(sorted(glob.glob(f"{work}/runs/init_check/ckpt_*.h5"))[-1], "r") as b:
        names = sorted(a["params"].keys())
        same_names = names == sorted(b["params"].keys())
        maxdiff = max(float(np.abs(a["params"][k][()].astype(np.float64) - b["params"][k][()]).max()) for k in names)
        init = dict(export=f"{work}/init.h5" + ("" if keep == "1" else " (deleted after the report; --keep-work keeps it)"),
                    train_lr0_checkpoint_equal=bool(same_names and maxdiff == 0.0),
                    max_abs_diff=maxdiff, tensors=len(names), loss0_export=float(a["loss0"][()]))
except Exception as e:  # noqa: BLE001
    init = dict(error=str(e))

R = {}
R["sm_one"] = dict(system="spikemesh", layout="one rank", bn="whole batch", ref=None, **sm_result("sm_one"))
R["sm_dp"] = dict(system="spikemesh", layout="dp=2", bn="per rank", ref=None, **sm_result("sm_dp"))
R["sm_dp_syncbn"] = dict(system="spikemesh", layout="dp=2 --sync-bn", bn="synced", ref="sm_one",
                         **sm_result("sm_dp_syncbn"))
R["sm_tp"] = dict(system="spikemesh", layout="tp=2", bn="channel shards", ref="sm_one", **sm_result("sm_tp"))
R["sm_accum"] = dict(system="spikemesh", layout="one rank, --grad-accum 2", bn="per micro-step", ref=None,
                     **sm_result("sm_accum"))
R["sm_pp"] = dict(system="spikemesh", layout="pp=2, 2 microbatches", bn="per microbatch", ref="sm_accum",
                  **sm_result("sm_pp"))
sj_rows = [("sj_one", "one rank", "whole batch", "sm_one"),
           ("sj_dp", "dp=2 (DDP)", "per rank", "sm_dp"),
           ("sj_tp", "tp=2 (ChannelShard)", "channel shards", "sm_one"),
           ("sj_pp", "pp=2 (GPipe, as shipped)", "whole batch", "sm_one"),
           ("sj_pp_fix", "pp=2 (GPipe, example tensors requires_grad)", "whole batch", "sm_one")]
for key, layout, bn, ref in sj_rows:
    res = sj_result(key)
    if res is None:
        continue
    res.pop("system", None)
    R[key] = dict(system="spikingjelly", layout=layout, bn=bn, ref=ref, **res)
if init.get("loss0_export") is not None and R["sm_one"]["losses"]:
    init["train_step1_loss"] = R["sm_one"]["losses"][0]
for key, r in R.items():
    if r["ref"] and r["status"] == "ok" and R[r["ref"]]["status"] == "ok":
        r["comparison"] = compare(r["losses"], R[r["ref"]]["losses"])
# how much batch-norm semantics alone moves the losses
bn_effect = None
if R["sm_dp"]["status"] == "ok" and R["sm_one"]["status"] == "ok":
    bn_effect = compare(R["sm_dp"]["losses"], R["sm_one"]["losses"])

vers = {}
for key in ("sj_one", "sj_dp", "sj_tp", "sj_pp"):
    if key in R and R[key].get("versions"):
        vers = R[key]["versions"]
        break
try:
    sm_version = subprocess.run([sm_bin, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
except Exception:  # noqa: BLE001
    sm_version = "?"
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            timeout=30).stdout.strip() or "?"
except Exception:  # noqa: BLE001
    commit = "?"
cpu = "?"
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except Exception:  # noqa: BLE001
    pass
probe = next((R[k]["sj_trainer_probe"] for k in ("sj_pp", "sj_one") if k in R and R[k].get("sj_trainer_probe")), None)

doc = dict(
    generated=datetime.datetime.now().isoformat(timespec="seconds"), host=socket.gethostname(),
    cpu=cpu, cores=os.cpu_count(), spikemesh=sm_version, commit=commit,
    torch=vers.get("torch"), spikingjelly=vers.get("spikingjelly"), spikingjelly_state=sj_state,
    setup=dict(model="cifar10dvs_vgg", dropout=0.0, T=T, global_batch=gb, dp_batch_per_rank=gb // 2,
               steps=steps, optimizer="adam", lr=1e-3, weight_decay=0.0, precision=precision, seed=seed,
               data=f"spikemesh data synth-dvs --T {T} --train {gb * steps} --test {gb} --seed {seed}, file order",
               loss="cross-entropy of the mean output over T", device="cpu", threads_per_rank=1,
               backends=dict(spikemesh="Open MPI", spikingjelly="torch.distributed gloo")),
    tolerance=dict(relative=tol, on="every step's loss"),
    init_check=init, sj_trainer_probe=probe, bn_effect_dp_vs_one_rank=bn_effect, wall_s=wall,
    runs=[dict(key=k, **{kk: vv for kk, vv in r.items()}) for k, r in R.items()])
os.makedirs(out, exist_ok=True)
with open(f"{out}/multirank.json", "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")

# ---- markdown
ref_name = {k: f"{R[k]['system']} {R[k]['layout']}" for k in R}
def fmt(v):
    return f"{v:.9f}"
def sci(v):
    return f"{v:.1e}"
L = []
L.append("## Multi-rank peer: SpikingJelly's distributed helpers beside spikemesh (VGG, 2 ranks, CPU)")
L.append("")
L.append(f"`bash bench/multirank.sh` on {doc['generated'][:10]}, {cpu} ({os.cpu_count()} cores), "
         f"{sm_version} (commit {commit}), torch {vers.get('torch', '—')}, spikingjelly "
         f"{vers.get('spikingjelly', '—')}; wall time {wall} s.")
L.append("")
L.append(f"Setup: `cifar10dvs_vgg`, dropout 0, T {T}, synthetic CIFAR10-DVS-shaped events "
         f"(`spikemesh data synth-dvs --seed {seed}`, {gb * steps} training samples read in file order by both), "
         f"global batch {gb} (dp: {gb // 2} per rank, contiguous halves), Adam lr 1e-3, {precision}, "
         f"{steps} steps, cross-entropy of the mean output over T, 1 thread per rank. "
         "Both systems start from the same weights: spikemesh's export (`dump-grads --seed "
         f"{seed}`, HDF5 /params + /buffers) is loaded into SpikingJelly; ")
if init.get("train_lr0_checkpoint_equal"):
    L[-1] += (f"`spikemesh train --seed {seed}` starts from exactly these (a one-step run with lr 0 leaves all "
              f"{init['tensors']} parameter tensors bitwise equal to the export).")
else:
    L[-1] += f"the check that `spikemesh train --seed {seed}` starts from them did not pass: {init}."
L.append("")
hdr = "| system | layout | BN statistics | status | " + " | ".join(f"loss {i + 1}" for i in range(steps)) + \
      f" | reference | max abs Δ | max rel Δ | agree (rel ≤ {tol:g}) |"
L.append(hdr)
L.append("|" + "---|" * (hdr.count("|") - 1))
for k, r in R.items():
    if r["status"] == "ok":
        cells = [fmt(v) for v in r["losses"]]
    else:
        cells = ["—"] * steps
    c = r.get("comparison")
    if c:
        verdict = "yes" if c["agree"] else f"no (agrees through step {c['agree_through_step']})"
        cmp_cells = [ref_name[r["ref"]], sci(c["max_abs_diff"]), sci(c["max_rel_diff"]), verdict]
    elif r["ref"] is None:
        cmp_cells = ["(reference)", "", "", ""]
    else:
        cmp_cells = [ref_name[r["ref"]], "—", "—", "—"]
    L.append(f"| {r['system']} | {r['layout']} | {r['bn']} | {r['status']} | " + " | ".join(cells) + " | " +
             " | ".join(cmp_cells) + " |")
L.append("")
L.append("References: SpikingJelly's dp (torch DDP, no SyncBatchNorm: batch norm normalises each rank's half "
         "batch) is compared with spikemesh dp without `--sync-bn`, which has the same semantics; every "
         "other layout computes the one-rank math for the same global batch and is compared with spikemesh "
         "on one rank.")
if bn_effect:
    L.append(f"Per-rank batch norm alone moves the losses by up to {sci(bn_effect['max_rel_diff'])} relative "
             "(spikemesh dp without vs. one rank), so that pairing matters.")
L.append("")
L.append("Findings:")
L.append("")
if sj_state != "ok":
    L.append(f"- SpikingJelly: {sj_state}. Its rows carry no numbers.")
if probe:
    if probe.get("error"):
        L.append(f"- SpikingJelly's own trainer, `{probe['api']}`, cannot run here: `{probe['error']}` "
                 "(it requires CUDA and NCCL). `bench/sj_distributed.py` therefore runs its step itself on "
                 "gloo from the pieces that trainer uses (a `vision.ModelBuilder` for the VGG, its DDP wrapper, "
                 "`tensor_parallel.ChannelShardConv2d`/`ChannelShardBatchNorm2d`, its GPipe stage set-up).")
    elif probe.get("note"):
        L.append(f"- `{probe['api']}`: {probe['note']}.")
notes, warns = [], []
for k, r in R.items():
    if r["system"] != "spikingjelly":
        continue
    for n in r.get("notes", []):
        if n not in notes:
            notes.append(n)
    for w in r.get("warnings", []):
        if "deprecated" in w and "broadcast_buffers" in w:
            continue
        if (k, w) not in warns and w not in [x for _, x in warns]:
            warns.append((k, w))
for n in notes:
    L.append(f"- SpikingJelly dp: {n}.")
for k, r in R.items():
    reason = " ".join((r.get("reason") or "").split())[:600]
    if r["status"] != "ok" and r["system"] == "spikingjelly" and sj_state == "ok":
        L.append(f"- SpikingJelly {r['layout']}: {r['status']}: `{reason}`")
    if r["status"] == "failed" and r["system"] == "spikemesh":
        L.append(f"- spikemesh {r['layout']}: failed: {reason}")
if "sj_pp_fix" in R and R["sj_pp_fix"]["status"] == "ok" and R.get("sj_pp", {}).get("status") != "ok":
    L.append("- SpikingJelly pp as shipped builds its `PipelineStage`s from `torch.empty(...)` example tensors "
             "(vision/training.py); with this torch the static stage metadata then says no gradient crosses "
             "the stage boundary, and stage 0's backward fails. Marking those example tensors "
             "`requires_grad` (the `requires_grad` row) is the whole fix"
             + (", and pp then agrees." if (R["sj_pp_fix"].get("comparison") or {}).get("agree") else "."))
for k, w in warns:
    short = re.match(r"(.*?\.\s.*?\.)(\s|$)", w)
    w = short.group(1) if short else w
    extra = ""
    if "allreduce" in w and R[k].get("mode") == "tp":
        extra = (" (SpikingJelly's rowwise `ChannelShardConv2d` all-reduces its partial sums in place inside "
                 "autograd; the gradient that passes through is still the right one")
        extra += ", and the tp losses agree)" if (R[k].get("comparison") or {}).get("agree") else ")"
    L.append(f"- SpikingJelly {R[k]['layout']}: torch warns `{w}`{extra}.")
unav = [r for k, r in R.items() if r["system"] == "spikemesh" and r["status"] == "unavailable"]
if unav:
    L.append(f"- spikemesh {' and '.join(r['layout'] for r in unav)}: refused, \"{unav[0]['reason']}\" — they "
             "are not available in this build; SpikingJelly's tp and pp are compared with spikemesh's one-rank "
             "trajectory, which is the same math.")
times = ", ".join(f"{k} {r['wall_s']:.0f}" for k, r in R.items() if r.get("wall_s") is not None)
L.append(f"- Run times (s, including start-up): {times}.")
if precision == "fp32":
    L.append("- fp32: spikes are thresholds, so a last-bit difference between two systems' kernels can flip a "
             "spike and the trajectories then separate after a few steps; fp64 (the default) is the "
             "exactness check.")
    c = R["sm_dp_syncbn"].get("comparison")
    if c and not c["agree"]:
        L[-1] += (f" spikemesh's own dp --sync-bn and one-rank runs separate the same way here (max rel "
                  f"{sci(c['max_rel_diff'])}, from step {c['agree_through_step'] + 1}).")
L.append("")
L.append(f"Raw results: `{out}/multirank.json`; logs and runs: `{work}/`.")
with open(f"{out}/multirank.md", "w") as f:
    f.write("\n".join(L) + "\n")
print("\n".join(L))
sys.exit(3 if any(r["system"] == "spikemesh" and r["status"] == "failed" for r in R.values()) else 0)
EOF
rc=$?
((KEEP)) || rm -f "$WORK"/runs/init_check/ckpt_*.h5 "$WORK/init.h5"
((rc == 3)) && SM_FAIL=1
((rc != 0 && rc != 3)) && die "report failed (exit $rc)"
log "wrote $OUT/multirank.json and $OUT/multirank.md in $(( $(date +%s) - START )) s"
((SM_FAIL)) && log "spikemesh failed (see the table and $WORK/logs/)"
exit $SM_FAIL
