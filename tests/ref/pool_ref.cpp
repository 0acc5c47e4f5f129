// pool_ref.cpp — naive pooling reference (see pool_ref.h).
#include "pool_ref.h"

#include <limits>

namespace sm {
namespace ref {
namespace {

// Plane p of x copied into a (H+2pad)×(W+2pad) plane filled with `fill` outside.
std::vector<double> padded_plane(const std::vector<double>& x, const PoolRefGeom& g, int64_t p, double fill) {
  const int64_t Hp = g.H + 2 * g.pad, Wp = g.W + 2 * g.pad;
  std::vector<double> out(Hp * Wp, fill);
  for (int64_t h = 0; h < g.H; ++h)
    for (int64_t w = 0; w < g.W; ++w) out[(h + g.pad) * Wp + (w + g.pad)] = x[(p * g.H + h) * g.W + w];
  return out;
}

}  // namespace

void maxpool2d_ref(const std::vector<double>& x, const PoolRefGeom& g, const std::vector<double>& dy,
                   std::vector<double>& y, std::vector<double>& dx) {
  const int64_t Ho = g.Ho(), Wo = g.Wo(), Wp = g.W + 2 * g.pad;
  const double ninf = -std::numeric_limits<double>::infinity();
  y.assign(g.P * Ho * Wo, 0.0);
  dx.assign(g.P * g.H * g.W, 0.0);
  for (int64_t p = 0; p < g.P; ++p) {
    const std::vector<double> xp = padded_plane(x, g, p, ninf);
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        int64_t bh = -1, bw = -1;
        double best = ninf;
        for (int a = 0; a < g.k; ++a)
          for (int b = 0; b < g.k; ++b) {
            const int64_t hh = i * g.stride + a, ww = j * g.stride + b;
            const double v = xp[hh * Wp + ww];
            const bool real = hh >= g.pad && hh < g.H + g.pad && ww >= g.pad && ww < g.W + g.pad;
            if (real && (bh < 0 || v > best)) {
              best = v;
              bh = hh - g.pad;
              bw = ww - g.pad;
            }
          }
        const int64_t o = (p * Ho + i) * Wo + j;
        y[o] = best;
        dx[(p * g.H + bh) * g.W + bw] += dy[o];
      }
  }
}

void avgpool2d_ref(const std::vector<double>& x, const PoolRefGeom& g, const std::vector<double>& dy,
                   std::vector<double>& y, std::vector<double>& dx) {
  const int64_t Ho = g.Ho(), Wo = g.Wo(), Wp = g.W + 2 * g.pad;
  y.assign(g.P * Ho * Wo, 0.0);
  dx.assign(g.P * g.H * g.W, 0.0);
  for (int64_t p = 0; p < g.P; ++p) {
    const std::vector<double> xp = padded_plane(x, g, p, 0.0);
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t o = (p * Ho + i) * Wo + j;
        double s = 0;
        for (int a = 0; a < g.k; ++a)
          for (int b = 0; b < g.k; ++b) s += xp[(i * g.stride + a) * Wp + (j * g.stride + b)];
        y[o] = s / (g.k * g.k);
        for (int a = 0; a < g.k; ++a)
          for (int b = 0; b < g.k; ++b) {
            const int64_t hh = i * g.stride + a - g.pad, ww = j * g.stride + b - g.pad;
            if (hh >= 0 && hh < g.H && ww >= 0 && ww < g.W) dx[(p * g.H + hh) * g.W + ww] += dy[o] / (g.k * g.k);
          }
      }
  }
}

}  // namespace ref
}  // namespace sm
