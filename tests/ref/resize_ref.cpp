// resize_ref.cpp — see resize_ref.h.
#include "resize_ref.h"

#include <algorithm>
#include <cmath>

namespace sm::ref {

namespace {
// weights[o][j] of one axis, each row normalised.
std::vector<std::vector<double>> axis(int in, int out) {
  const double scale = static_cast<double>(in) / out, support = std::max(scale, 1.0);
  std::vector<std::vector<double>> w(out, std::vector<double>(in, 0.0));
  for (int o = 0; o < out; ++o) {
    const double center = scale * (o + 0.5);
    double total = 0;
    for (int j = 0; j < in; ++j) {
      w[o][j] = std::max(0.0, 1.0 - std::fabs((j + 0.5 - center) / support));
      total += w[o][j];
    }
    for (double& v : w[o]) v /= total;
  }
  return w;
}
}  // namespace

std::vector<double> resize_bilinear_aa(const std::vector<double>& in, int planes, int h, int w, int out_h, int out_w) {
  const auto wy = axis(h, out_h), wx = axis(w, out_w);
  std::vector<double> out(static_cast<size_t>(planes) * out_h * out_w, 0.0);
  for (int p = 0; p < planes; ++p)
    for (int r = 0; r < out_h; ++r)
      for (int c = 0; c < out_w; ++c) {
        double acc = 0;
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x) acc += wy[r][y] * wx[c][x] * in[(static_cast<size_t>(p) * h + y) * w + x];
        out[(static_cast<size_t>(p) * out_h + r) * out_w + c] = acc;
      }
  return out;
}

}  // namespace sm::ref
