#!/usr/bin/env bash
# gpu_bundle.sh — prepare a GPU machine run from this (GPU-less) machine. Builds for Hopper
# (sm_90, portable -march) into build-gpu/, then writes into .device/ (git-ignored), which
# travels with run(carry=['.device']):
#   spikemesh.tar.xz   spikemesh, spikemesh_tests, spikemesh_mpi_tests with their MPI (PMIx
#                      included), HDF5 and oneDNN runtimes (../shared/tools/bundle.sh); CUDA,
#                      cuDNN, cuBLAS and NCCL come from the target machine
#   wheels/            SpikingJelly and loguru (pure-Python wheels; the GPU machine has torch,
#                      numpy, h5py, tqdm but no network), for bench/sj_bench.py
#   manifest.txt       git commit, build time, the newest glibc symbol version the bundle needs
#                      (gpu_check.sh's preflight compares it with the machine's), file sizes
# Fails when what travels (tracked files + .device) would exceed 64 MiB (the most copied to a GPU machine).
# Usage: scripts/gpu_bundle.sh [BUNDLE_TOOL]   (default ../shared/tools/bundle.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL=${1:-$ROOT/../shared/tools/bundle.sh}
cd "$ROOT"
[ -x "$TOOL" ] || [ -f "$TOOL" ] || { echo "gpu_bundle: bundle tool $TOOL not found (pass its path)" >&2; exit 2; }
BIN=build-gpu/bin
PROGRAMS=("$BIN/spikemesh" "$BIN/spikemesh_tests" "$BIN/spikemesh_mpi_tests")
echo "gpu_bundle: building ${PROGRAMS[*]} (sm_90)"
make -j"$(nproc)" BUILD=build-gpu CUDA_ARCH=90 MARCH=x86-64-v3 "${PROGRAMS[@]}"
[ "$(readelf -SW "$BIN/spikemesh" | grep -c nv_fatbin)" -gt 0 ] || { echo "gpu_bundle: $BIN/spikemesh has no CUDA code (no nvcc?)" >&2; exit 1; }

mkdir -p .device/wheels
# Debug sections off (line tables stay: -g1 builds keep compute-sanitizer's file:line).
STRIP=$(mktemp -d); trap 'rm -rf "$STRIP"' EXIT
for p in "${PROGRAMS[@]}"; do objcopy --strip-debug --keep-section=.debug_line "$p" "$STRIP/$(basename "$p")" 2>/dev/null ||
  cp "$p" "$STRIP/"; done
bash "$TOOL" .device/spikemesh.tar.xz "$STRIP"/*

# SpikingJelly 2.0 for the GPU machine's python3.12 (pure Python; its heavy requirements are
# already there: torch, numpy, h5py, tqdm, packaging). Cached: downloaded once.
WHEELS=(spikingjelly==2.0.0 loguru==0.7.3)
for w in "${WHEELS[@]}"; do
  n=${w%%==*}; v=${w##*==}
  ls .device/wheels/"$n"-"$v"-*.whl >/dev/null 2>&1 && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .device/wheels "$w" ||
    echo "gpu_bundle: warning: could not download $w (no network?): the SpikingJelly peer will not run" >&2
done

# The newest glibc symbol version any bundled ELF file (programs, libraries, MPI plugins) needs.
X=$(mktemp -d -p "$STRIP"); tar -xJf .device/spikemesh.tar.xz -C "$X"
need=$( { find "$X" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + 2>/dev/null || true; } |
       grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1 || true)
[ -n "$need" ] || { echo "gpu_bundle: could not read the glibc versions the bundle needs (objdump)" >&2; exit 1; }
{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo '+local-changes')"
  echo "built $(date -u +%FT%TZ) on $(hostname)"
  echo "glibc_needed $need"
  echo "bundle_bytes $(stat -c %s .device/spikemesh.tar.xz)"
  ls .device/wheels/*.whl 2>/dev/null | sed 's|^|wheel |'
} > .device/manifest.txt

tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
device=$(du -sb .device | cut -f1)
total=$(( (tracked + device) / 1048576 ))
cat .device/manifest.txt
echo "gpu_bundle: what travels: $((tracked / 1048576)) MiB tracked + $((device / 1048576)) MiB .device = ${total} MiB (limit 64)"
[ "$total" -lt 62 ] || { echo "gpu_bundle: too large to travel" >&2; exit 1; }
echo "next: make gpu-rehearsal, then run(command='bash scripts/gpu_check.sh', carry=['.device'], timeout_s=540)"
