// spiking_attention_ref.cpp — naive spiking self-attention reference (see the header).
#include "spiking_attention_ref.h"

namespace sm {
namespace ref {
namespace {

// Flat index of element (t, n, part, head, row, l) of qkv viewed as [T, N, 3, heads, d, L].
int64_t at6(const SsaRefGeom& g, int64_t t, int64_t n, int64_t part, int64_t h, int64_t r, int64_t l) {
  return ((((t * g.N + n) * 3 + part) * g.heads + h) * g.d + r) * g.L + l;
}
// Flat index of element (t, n, head·d + i, l) of out [T, N, C, L].
int64_t at_out(const SsaRefGeom& g, int64_t t, int64_t n, int64_t h, int64_t i, int64_t l) {
  return ((t * g.N + n) * g.C() + h * g.d + i) * g.L + l;
}

}  // namespace

void ssa_forward_ref(const std::vector<double>& qkv, const SsaRefGeom& g, double scale, std::vector<double>& out) {
  const int64_t d = g.d, L = g.L;
  out.assign(g.T * g.N * g.C() * L, 0.0);
  for (int64_t t = 0; t < g.T; ++t)
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t h = 0; h < g.heads; ++h) {
        auto q = [&](int64_t r, int64_t l) { return qkv[at6(g, t, n, 0, h, r, l)]; };
        auto k = [&](int64_t r, int64_t l) { return qkv[at6(g, t, n, 1, h, r, l)]; };
        auto v = [&](int64_t r, int64_t l) { return qkv[at6(g, t, n, 2, h, r, l)]; };
        std::vector<double> x(d * d, 0.0);  // x = v @ k^T
        for (int64_t i = 0; i < d; ++i)
          for (int64_t j = 0; j < d; ++j)
            for (int64_t m = 0; m < L; ++m) x[i * d + j] += v(i, m) * k(j, m);
        for (int64_t i = 0; i < d; ++i)  // (x @ q) * scale
          for (int64_t l = 0; l < L; ++l) {
            double s = 0.0;
            for (int64_t j = 0; j < d; ++j) s += x[i * d + j] * q(j, l);
            out[at_out(g, t, n, h, i, l)] = s * scale;
          }
      }
}

void ssa_backward_ref(const std::vector<double>& qkv, const std::vector<double>& dout, const SsaRefGeom& g,
                      double scale, std::vector<double>& dqkv) {
  const int64_t d = g.d, L = g.L;
  dqkv.assign(qkv.size(), 0.0);
  for (int64_t t = 0; t < g.T; ++t)
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t h = 0; h < g.heads; ++h) {
        auto q = [&](int64_t r, int64_t l) { return qkv[at6(g, t, n, 0, h, r, l)]; };
        auto k = [&](int64_t r, int64_t l) { return qkv[at6(g, t, n, 1, h, r, l)]; };
        auto v = [&](int64_t r, int64_t l) { return qkv[at6(g, t, n, 2, h, r, l)]; };
        auto dO = [&](int64_t i, int64_t l) { return dout[at_out(g, t, n, h, i, l)]; };
        // out[i, l] = scale · Σ_j Σ_m V[i, m] K[j, m] Q[j, l]; every term's partials:
        for (int64_t i = 0; i < d; ++i)
          for (int64_t l = 0; l < L; ++l)
            for (int64_t j = 0; j < d; ++j)
              for (int64_t m = 0; m < L; ++m) {
                const double go = scale * dO(i, l);
                dqkv[at6(g, t, n, 0, h, j, l)] += go * v(i, m) * k(j, m);  // ∂/∂Q[j, l]
                dqkv[at6(g, t, n, 1, h, j, m)] += go * v(i, m) * q(j, l);  // ∂/∂K[j, m]
                dqkv[at6(g, t, n, 2, h, i, m)] += go * k(j, m) * q(j, l);  // ∂/∂V[i, m]
              }
      }
}

}  // namespace ref
}  // namespace sm
