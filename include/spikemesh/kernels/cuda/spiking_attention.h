// spiking_attention.h (kernels/cuda) — Spikformer's spiking self-attention core on the GPU,
// forward and backward, matching kernels/cpu/spiking_attention.h (the reference; same layout
// and math). Include only when SPIKEMESH_HAVE_CUDA is defined.
//
// Layout: qkv [B, 3C, L] (B = T·N, C = heads·d), channel part·C + head·d + j (part 0 = q,
// 1 = k, 2 = v); out [B, C, L]. Per (b, head), with Q, K, V the d×L blocks:
//   A = V·Kᵀ (d×d),  out = (A·Q)·scale;
//   dQ = scale·Aᵀ·dOut,  dA = scale·dOut·Qᵀ,  dV = dA·K,  dK = dAᵀ·V.
//
// Two forward paths (the layer, layers/spiking_attention_cuda.cpp, picks one per call):
//  * Popcount (spikes: the input is flagged binary and ssa_popcount_supported(g)) — reads
//    the qkv bits the layer saves for backward anyway (kernels/cuda/bitpack.h layout, one
//    flat bit string): one block per (b, head) re-aligns the rows of V and K into 32-bit words
//    in shared memory (funnel shifts; rows need not start on a word), counts A[i, j] =
//    popc(V_i ∧ K_j) as exact integers, then forms Σ_j A[i, j]·Q[j, l] as an exact integer
//    sum fused with the write out = T(sum · f32(scale)). Reads 1/32 of the activation bytes.
//  * Gemm (every other case: non-binary input, or d too large for A in 48 KB of shared
//    memory, d > 109) — two launches of a plain tiled f32 GEMM (32×32 output tiles, f32
//    accumulation): A into the f32 workspace, then out = (A·Q)·scale fused with the write.
//    Also the "measure both" alternative for spikes: on 0/1 input every sum is an integer, so
//    in f32 both paths give identical bits (while d·L < 2^24), equal to the CPU's.
// Backward: five launches of the same GEMM (A, dA into the workspace, then dQ, dV, dK written
// into their parts of dqkv), reading q, k, v either as T values or from the saved bits.
//
// Invariants: T = float, __nv_bfloat16 or __half, arithmetic in f32 (one rounding on store);
// every output element is written exactly once by one thread, sums run in a fixed order (k
// ascending), no atomics: results are deterministic. Device pointers; async on `stream`.
// A zero-sized geometry (B = 0) launches nothing.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "spikemesh/kernels/cpu/spiking_attention.h"

namespace sm {
namespace cuda {

enum class SsaPath { Popcount, Gemm };

// The popcount forward fits this head size (A's d² counts plus one 32-token chunk of two
// d-row bit blocks within 48 KB of shared memory: d <= 109).
bool ssa_popcount_supported(const cpu::SsaGeom& g);

// f32 workspace (elements) the launchers below need: the Gemm forward B·heads·d² (A), the
// backward 2·B·heads·d² (A and dA); the popcount forward none.
int64_t ssa_workspace_floats(const cpu::SsaGeom& g, SsaPath forward_path);
int64_t ssa_backward_workspace_floats(const cpu::SsaGeom& g);

// out [B, C, L] from qkv bits (bitpack.h layout of the [B, 3C, L] spikes). Requires
// ssa_popcount_supported(g).
template <typename T>
void ssa_forward_popcount_cuda(const uint32_t* qkv_bits, const cpu::SsaGeom& g, double scale, T* out,
                               cudaStream_t stream);

// out [B, C, L] from qkv values [B, 3C, L]; work: ssa_workspace_floats(g, SsaPath::Gemm) f32.
template <typename T>
void ssa_forward_gemm_cuda(const T* qkv, const cpu::SsaGeom& g, double scale, float* work, T* out,
                           cudaStream_t stream);

// dqkv [B, 3C, L] (fully overwritten) from dout [B, C, L] and the forward's input, given as
// values (qkv) or as bits (qkv_bits): exactly one of the two is non-null.
// work: ssa_backward_workspace_floats(g) f32.
template <typename T>
void ssa_backward_cuda(const T* dout, const T* qkv, const uint32_t* qkv_bits, const cpu::SsaGeom& g, double scale,
                       float* work, T* dqkv, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
