#!/usr/bin/env bash
# gpu_rehearsal.sh — `make gpu-rehearsal`: the GPU procedure rehearsed on a bare machine, here,
# before time on a GPU machine is spent on it. Root only (debootstrap, chroot, mounts).
#
#   1. a bare Debian 12 root (debootstrap --variant=minbase, plus python3 as the GPU machine
#      has; no MPI, HDF5, oneDNN, xz, ssh) in .rehearsal/root (git-ignored), made once and
#      cached; checked to be bare before every use;
#   2. the bundle: scripts/gpu_bundle.sh (incremental build-gpu/, .device/);
#   3. a copy of the working tree (tracked files + .device, what run(carry=['.device']) sends)
#      into the root; this machine's CUDA libraries appear there only where the GPU machine has
#      them, as pip wheels (/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib), and
#      there is no driver (libcuda), so no GPU is visible;
#   4. inside the root (chroot, /proc, /sys, /dev, a clean environment):
#        a. `gpu_check.sh --no-gpu` — the preflight, MPI sanity (commtest, 2-rank dp and pp
#           training), CPU unit tests, GPU tests skipping cleanly, 2-rank MPI tests,
#           gpu_errors.sh, a bench record and the table — must pass;
#        b. `gpu_check.sh` as on the GPU machine — must fail fast in its preflight because no
#           GPU is visible (a driverless machine never passes by skipping);
#        c. `gpu_check.sh --no-gpu` with a budget of 0 s — every step is left out by the
#           deadline, the summary still prints, and the exit status is non-zero;
#        d. the test steps' skip check: GPU tests that skip (here: no GPU) fail them (exit 3);
#        e. the GPU-only branches end to end with stand-ins for nvidia-smi and compute-sanitizer
#           (no real GPU, so their steps fail): no bash error anywhere, the sanitizer's "Device not
#           supported" is a note, the peers are tried, the summary prints, exit 1.
# Output: .rehearsal/out/{a,b,c,e}/ and {a,b,c,d,e}.log (gpu_check.sh's files) and one line per rehearsal.
# Variables: REHEARSAL_DIR (default .rehearsal), DEBIAN_MIRROR, SKIP_BUNDLE=1 (use .device as is).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIR=$(realpath -m "${REHEARSAL_DIR:-$ROOT/.rehearsal}")
RFS=$DIR/root
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
MARK=$RFS/.spikemesh-bare-root
say() { echo "gpu-rehearsal: $*"; }
die() { echo "gpu-rehearsal: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot and mounts)"
START=$SECONDS

# ---- 1. the bare root ------------------------------------------------------------------------
if [ ! -f "$MARK" ]; then
  if ! command -v debootstrap >/dev/null; then
    say "installing debootstrap (Debian package)"
    apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap; } ||
      die "could not install debootstrap"
  fi
  say "making a bare Debian 12 root in $RFS (minbase + python3; once, cached)"
  rm -rf "$RFS.tmp" "$RFS"
  mkdir -p "$DIR"
  debootstrap --variant=minbase --include=python3 bookworm "$RFS.tmp" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 ||
    die "debootstrap failed (see $DIR/debootstrap.log)"
  mv "$RFS.tmp" "$RFS"
  date -u +%FT%TZ >"$MARK"
fi
bare=""
for f in usr/bin/mpirun usr/bin/orterun usr/bin/xz usr/bin/ssh; do [ -e "$RFS/$f" ] && bare="$bare $f"; done
for l in libmpi.so libhdf5 libdnnl libpmix libcudart libcuda.so; do
  ls "$RFS"/usr/lib/x86_64-linux-gnu/$l* >/dev/null 2>&1 && bare="$bare $l"
done
[ -z "$bare" ] || die "the rehearsal root is not bare (has:$bare); remove $RFS to remake it"
say "bare root ok ($(cat "$MARK")): no MPI, HDF5, oneDNN, PMIx, CUDA, xz or ssh"

# ---- 2. the bundle -------------------------------------------------------------------------
if [ "${SKIP_BUNDLE:-0}" != 1 ]; then
  say "building the bundle (scripts/gpu_bundle.sh)"
  bash scripts/gpu_bundle.sh >"$DIR/bundle.log" 2>&1 || { tail -20 "$DIR/bundle.log"; die "scripts/gpu_bundle.sh failed"; }
  grep "what travels" "$DIR/bundle.log" | sed 's/^/gpu-rehearsal: /'
fi
[ -f .device/spikemesh.tar.xz ] || die "no .device/spikemesh.tar.xz (run scripts/gpu_bundle.sh)"

# ---- 3. the tree and the mounts ----------------------------------------------------------------
W=$RFS/work/spikemesh
rm -rf "$RFS/work" "$RFS/tmp/"gpu_check.* ; mkdir -p "$W"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$W"
cp -a .device "$W/"
CUDA_LIB=$(dirname "$(realpath "$(ldconfig -p | awk '/libcudart.so.13 /{print $NF; exit}')" 2>/dev/null || echo /usr/local/cuda/lib64/libcudart.so.13)")
WHEEL_LIB=$RFS/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib
MOUNTS=()
mnt() { mkdir -p "${@: -1}"; mount "$@"; MOUNTS+=("${@: -1}"); }
cleanup() {
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mnt -t proc proc "$RFS/proc"
mnt -t sysfs sysfs "$RFS/sys"   # the GPU machine has /sys (hwloc reads the CPU topology there)
mnt --rbind /dev "$RFS/dev"
mnt -t tmpfs -o size=2g tmpfs "$RFS/dev/shm"
if [ -d "$CUDA_LIB" ]; then
  mnt --bind -o ro "$CUDA_LIB" "$WHEEL_LIB"
  [ -e "$WHEEL_LIB/libcuda.so.1" ] && die "$CUDA_LIB holds a driver (libcuda.so.1): the rehearsal must have none"
else
  say "warning: no CUDA libraries found here: the bundle's programs cannot start in the rehearsal"
fi

# ---- 4. the rehearsals ---------------------------------------------------------------------------
inroot() {  # inroot OUTDIR ENV... -- gpu_check args
  local out=$1; shift
  mkdir -p "$DIR/out/$out"; rm -f "$DIR/out/$out"/*
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$RFS/work/out"; rm -rf "$RFS/work/out/$out"
  chroot "$RFS" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    OUT="/work/out/$out" "${envs[@]}" bash /work/spikemesh/scripts/gpu_check.sh "$@" >"$DIR/out/$out.log" 2>&1
  local rc=$?
  cp -a "$RFS/work/out/$out/." "$DIR/out/$out/" 2>/dev/null || true
  return $rc
}
fails=0
set +e
say "a. gpu_check.sh --no-gpu in the bare root (minutes: CPU unit tests on $(nproc) cores)"
inroot a -- --no-gpu; rc=$?
tail -n 40 "$DIR/out/a.log" | sed 's/^/   | /'
if [ $rc -eq 0 ]; then say "a. PASS: everything that needs no GPU works from the bundle on a bare machine"
else say "a. FAIL (exit $rc): see $DIR/out/a.log and $DIR/out/a/"; fails=$((fails + 1)); fi

say "b. gpu_check.sh (GPU mode) on a machine without a driver must fail in its preflight"
t0=$SECONDS; inroot b -- ; rc=$?
if [ $rc -eq 2 ] && grep -q "PREFLIGHT FAILED: no GPU visible" "$DIR/out/b.log"; then
  say "b. PASS: exit 2 after $((SECONDS - t0)) s: $(grep 'PREFLIGHT FAILED' "$DIR/out/b.log")"
else say "b. FAIL: exit $rc, wanted 2 with 'no GPU visible'"; tail -5 "$DIR/out/b.log"; fails=$((fails + 1)); fi

say "c. gpu_check.sh --no-gpu with a deadline of 0 s: steps left out, summary printed, non-zero exit"
inroot c GPU_CHECK_BUDGET_S=0 -- --no-gpu; rc=$?
if [ $rc -eq 1 ] && grep -q "left out by the deadline" "$DIR/out/c.log" && ! grep -q "^ok    CPU" "$DIR/out/c.log"; then
  say "c. PASS: exit 1, $(grep -c '^SKIP' "$DIR/out/c.log") steps left out, summary printed"
else say "c. FAIL: exit $rc"; tail -5 "$DIR/out/c.log"; fails=$((fails + 1)); fi

say "d. a GPU test that skips fails gpu_check's test steps (as they run when a GPU is visible)"
chroot "$RFS" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -c '
  D=$(mktemp -d) && cd /work/spikemesh &&
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], \"r:xz\").extractall(sys.argv[2])" .device/spikemesh.tar.xz "$D" &&
  . "$D/env.sh" && bash scripts/gpu_check.sh --gtest-no-skip "$D/bin/spikemesh_tests" --gtest_color=no \
    --gtest_filter="GpuNeuron*"; rc=$?; rm -rf "$D"; exit $rc' >"$DIR/out/d.log" 2>&1
rc=$?
if [ $rc -eq 3 ] && grep -q "GPU test(s) were skipped" "$DIR/out/d.log"; then
  say "d. PASS: exit 3, $(grep '^\[  SKIPPED \] Gpu' "$DIR/out/d.log" | sed 's/ (.*//' | sort -u | wc -l) skipped tests named"
else say "d. FAIL: exit $rc, wanted 3"; tail -5 "$DIR/out/d.log"; fails=$((fails + 1)); fi

say "e. GPU mode end to end on a fake GPU (nvidia-smi and compute-sanitizer stand-ins): every step runs and fails"
say "   for want of a real GPU, the script itself never breaks (no bash error), the summary and table print"
mkdir -p "$RFS/work/fakegpu"
cat >"$RFS/work/fakegpu/nvidia-smi" <<'EOF2'
#!/bin/sh
case "$1" in -L) echo "GPU 0: Rehearsal stand-in (UUID: GPU-0)";; *) echo "Rehearsal stand-in, 0 MiB, 0, 0";; esac
EOF2
printf '#!/bin/sh\necho "========= Error: Device not supported"\nexit 1\n' >"$RFS/work/fakegpu/compute-sanitizer"
chmod +x "$RFS/work/fakegpu/"*
mkdir -p "$DIR/out/e"; rm -f "$DIR/out/e"/*; rm -rf "$RFS/work/out/e"
chroot "$RFS" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/work/fakegpu:/usr/sbin:/usr/bin:/sbin:/bin \
  OUT=/work/out/e bash /work/spikemesh/scripts/gpu_check.sh >"$DIR/out/e.log" 2>&1
rc=$?
cp -a "$RFS/work/out/e/." "$DIR/out/e/" 2>/dev/null || true
steps=$(grep -cE '^(ok|FAIL|peer|info|SKIP|note) ' "$DIR/out/e.log")
bashbug=$(cat "$DIR/out/e.log" "$DIR/out/e"/*.log 2>/dev/null | grep -E 'unbound variable|syntax error|command not found|bad substitution' | head -3)
if [ $rc -eq 1 ] && [ -z "$bashbug" ] && grep -q "FAIL  unit \*Gpu\* tests (no skips): exit 3" "$DIR/out/e.log" &&
   grep -q "note  compute-sanitizer cannot attach" "$DIR/out/e.log" && grep -q "^peer  SpikingJelly eager" "$DIR/out/e.log" &&
   grep -q "^gpu_check (gpu):" "$DIR/out/e.log"; then
  say "e. PASS: exit 1 after $steps step lines, no script error"
else say "e. FAIL: exit $rc; script errors: ${bashbug:-none}"; tail -8 "$DIR/out/e.log"; fails=$((fails + 1)); fi

say "$((5 - fails)) of 5 rehearsals passed in $((SECONDS - START)) s (logs: $DIR/out/)"
[ $fails -eq 0 ]
