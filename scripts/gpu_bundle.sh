#!/usr/bin/env bash
# gpu_bundle.sh — prepare a GPU node run from this (GPU-less) machine: build for Hopper
# (sm_90, portable -march) into build-gpu/ and pack the programs with their MPI/HDF5/oneDNN
# runtimes (../shared/tools/bundle.sh) into .device/spikemesh.tar.xz (git-ignored), which
# scripts/gpu_check.sh unpacks on the GPU machine. Usage: scripts/gpu_bundle.sh [BUNDLE_TOOL]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL=${1:-$ROOT/../shared/tools/bundle.sh}
cd "$ROOT"
make -j"$(nproc)" BUILD=build-gpu CUDA_ARCH=90 MARCH=x86-64-v3 build-gpu/bin/spikemesh build-gpu/bin/spikemesh_tests
mkdir -p .device
"$TOOL" .device/spikemesh.tar.xz build-gpu/bin/spikemesh build-gpu/bin/spikemesh_tests
ls -la .device/spikemesh.tar.xz
echo "now: run(command='bash scripts/gpu_check.sh', carry=['.device'])"
