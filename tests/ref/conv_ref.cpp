// conv_ref.cpp — naive double loops for conv_ref.h. Each output is a direct sum over the
// receptive field; the backward passes loop over the forward's index space and scatter.
#include "conv_ref.h"

namespace sm::ref {
namespace {
int64_t xi(const ConvRefShape& s, int64_t n, int64_t c, int64_t i, int64_t j) {
  return ((n * s.cin + c) * s.h + i) * s.w + j;
}
int64_t wi(const ConvRefShape& s, int64_t o, int64_t c, int64_t a, int64_t b) {
  return ((o * s.cin + c) * s.k + a) * s.k + b;
}
int64_t yi(const ConvRefShape& s, int64_t n, int64_t o, int64_t i, int64_t j) {
  return ((n * s.cout + o) * s.ho() + i) * s.wo() + j;
}
// Calls f(n, o, c, oi, oj, a, b, ii, ij) for every in-bounds term of the convolution sum.
template <class F>
void for_each_term(const ConvRefShape& s, F f) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.cout; ++o)
      for (int64_t oi = 0; oi < s.ho(); ++oi)
        for (int64_t oj = 0; oj < s.wo(); ++oj)
          for (int64_t c = 0; c < s.cin; ++c)
            for (int64_t a = 0; a < s.k; ++a)
              for (int64_t b = 0; b < s.k; ++b) {
                const int64_t ii = oi * s.stride - s.pad + a, ij = oj * s.stride - s.pad + b;
                if (ii < 0 || ii >= s.h || ij < 0 || ij >= s.w) continue;
                f(n, o, c, oi, oj, a, b, ii, ij);
              }
}
}  // namespace

std::vector<double> conv2d_forward(const ConvRefShape& s, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& bias) {
  std::vector<double> y(s.n * s.cout * s.ho() * s.wo(), 0.0);
  for_each_term(s, [&](int64_t n, int64_t o, int64_t c, int64_t oi, int64_t oj, int64_t a,
                       int64_t b, int64_t ii, int64_t ij) {
    y[yi(s, n, o, oi, oj)] += x[xi(s, n, c, ii, ij)] * w[wi(s, o, c, a, b)];
  });
  if (!bias.empty())
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t o = 0; o < s.cout; ++o)
        for (int64_t p = 0; p < s.ho() * s.wo(); ++p) y[(n * s.cout + o) * s.ho() * s.wo() + p] += bias[o];
  return y;
}

std::vector<double> conv2d_backward_data(const ConvRefShape& s, const std::vector<double>& dy,
                                         const std::vector<double>& w) {
  std::vector<double> dx(s.n * s.cin * s.h * s.w, 0.0);
  for_each_term(s, [&](int64_t n, int64_t o, int64_t c, int64_t oi, int64_t oj, int64_t a,
                       int64_t b, int64_t ii, int64_t ij) {
    dx[xi(s, n, c, ii, ij)] += dy[yi(s, n, o, oi, oj)] * w[wi(s, o, c, a, b)];
  });
  return dx;
}

std::vector<double> conv2d_backward_weights(const ConvRefShape& s, const std::vector<double>& x,
                                            const std::vector<double>& dy) {
  std::vector<double> dw(s.cout * s.cin * s.k * s.k, 0.0);
  for_each_term(s, [&](int64_t n, int64_t o, int64_t c, int64_t oi, int64_t oj, int64_t a,
                       int64_t b, int64_t ii, int64_t ij) {
    dw[wi(s, o, c, a, b)] += dy[yi(s, n, o, oi, oj)] * x[xi(s, n, c, ii, ij)];
  });
  return dw;
}

std::vector<double> conv2d_backward_bias(const ConvRefShape& s, const std::vector<double>& dy) {
  std::vector<double> db(s.cout, 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.cout; ++o)
      for (int64_t p = 0; p < s.ho() * s.wo(); ++p) db[o] += dy[(n * s.cout + o) * s.ho() * s.wo() + p];
  return db;
}

}  // namespace sm::ref
