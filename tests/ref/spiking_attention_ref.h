// spiking_attention_ref.h — naive double-precision reference of Spikformer's spiking
// self-attention core for tests only, written straight from SpikingJelly's
// _ssa_kernel_torch: qkv.reshape(T, N, 3, heads, d, L); q, k, v = chunk; x = v @ kᵀ;
// x = (x @ q) · scale; reshape to [T, N, C, L]. Flat vectors, row-major.
// The backward differentiates the triple sum out[i, l] = scale · Σ_j Σ_m V[i, m] K[j, m] Q[j, l]
// element by element (O(d²·L²) per head) — independent of the kernel's matrix formulas.
#pragma once
#include <cstdint>
#include <vector>

namespace sm {
namespace ref {

struct SsaRefGeom {
  int64_t T = 1, N = 1, heads = 1, d = 1, L = 1;
  int64_t C() const { return heads * d; }
};

// qkv [T, N, 3C, L] -> out [T, N, C, L].
void ssa_forward_ref(const std::vector<double>& qkv, const SsaRefGeom& g, double scale, std::vector<double>& out);

// d loss / d qkv [T, N, 3C, L] given dout [T, N, C, L].
void ssa_backward_ref(const std::vector<double>& qkv, const std::vector<double>& dout, const SsaRefGeom& g,
                      double scale, std::vector<double>& dqkv);

}  // namespace ref
}  // namespace sm
