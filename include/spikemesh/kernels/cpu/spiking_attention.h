// spiking_attention.h (kernels/cpu) — Spikformer's spiking self-attention core
// (docs/semantics.md §3; SpikingJelly 2.0 SpikingSelfAttention._ssa_kernel_torch), forward and
// backward.
//
// Layout: qkv is [B, 3C, L] (B = T·N, C = heads·d, L tokens) with channel
// part·C + head·d + j (part 0 = q, 1 = k, 2 = v); out is [B, C, L] with channel head·d + i.
// Per (b, head), with Q, K, V the d×L row-major blocks of that head:
//   A = V·Kᵀ (d×d),  out = (A·Q)·scale            (no softmax; cost O(L·d²))
// Backward, given dOut (d×L):
//   dQ = scale·Aᵀ·dOut,  dA = scale·dOut·Qᵀ,  dV = dA·K,  dK = dAᵀ·V
//
// Invariants:
//  * (b, head) blocks are independent: OpenMP over them, no cross-thread reductions, so the
//    results do not depend on the thread count; outputs are fully overwritten.
//  * binary forward (the caller promises q, k, v are exactly 0 or 1): A is a matrix of
//    counts from popcounts of bit-packed rows of V and K, and A·Q sums integers in T, so
//    every value before the final ·scale is an exact integer (f32: while d·L < 2^24). The
//    result is therefore bitwise T(A·Q) · T(scale) — exactly the plain float math.
//  * non-binary forward and the backward accumulate in double and round once to T.
//  * binary backward (q, k, v exactly 0 or 1, d ≤ 64): A from popcounts, and dA, dV, dK add
//    only where Q, K, V fire (token masks) — the same double sums in the same order without
//    their exact-zero terms, so equal to the general path for finite values; dQ as there.
#pragma once
#include <cstdint>

namespace sm::cpu {

struct SsaGeom {
  int64_t batch = 1;  // B = T·N
  int64_t heads = 1;
  int64_t d = 1;      // channels per head
  int64_t L = 1;      // tokens
  int64_t C() const { return heads * d; }
};

// qkv: [B, 3C, L] -> out: [B, C, L]. binary: qkv holds only 0 and 1 (exact counting path).
template <typename T>
void ssa_forward(const T* qkv, const SsaGeom& g, double scale, bool binary, T* out);

// dout: [B, C, L], qkv: [B, 3C, L] (the forward's input) -> dqkv: [B, 3C, L] (q, k, v parts);
// binary: qkv holds only 0 and 1 (the path that adds where they fire).
template <typename T>
void ssa_backward(const T* dout, const T* qkv, const SsaGeom& g, double scale, bool binary, T* dqkv);

}  // namespace sm::cpu
