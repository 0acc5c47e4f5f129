// linear_ref.cpp — naive double loops for linear_ref.h.
#include "linear_ref.h"

namespace sm::ref {

std::vector<double> linear_forward(int64_t M, int64_t fin, int64_t fout, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& bias) {
  std::vector<double> y(M * fout, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t o = 0; o < fout; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int64_t i = 0; i < fin; ++i) s += x[m * fin + i] * w[o * fin + i];
      y[m * fout + o] = s;
    }
  return y;
}

std::vector<double> linear_backward_data(int64_t M, int64_t fin, int64_t fout,
                                         const std::vector<double>& dy, const std::vector<double>& w) {
  std::vector<double> dx(M * fin, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < fin; ++i)
      for (int64_t o = 0; o < fout; ++o) dx[m * fin + i] += dy[m * fout + o] * w[o * fin + i];
  return dx;
}

std::vector<double> linear_backward_weights(int64_t M, int64_t fin, int64_t fout,
                                            const std::vector<double>& x, const std::vector<double>& dy) {
  std::vector<double> dw(fout * fin, 0.0);
  for (int64_t o = 0; o < fout; ++o)
    for (int64_t i = 0; i < fin; ++i)
      for (int64_t m = 0; m < M; ++m) dw[o * fin + i] += dy[m * fout + o] * x[m * fin + i];
  return dw;
}

std::vector<double> linear_backward_bias(int64_t M, int64_t fout, const std::vector<double>& dy) {
  std::vector<double> db(fout, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t o = 0; o < fout; ++o) db[o] += dy[m * fout + o];
  return db;
}

std::vector<double> matmul(int64_t M, int64_t N, int64_t K, const std::vector<double>& a,
                           const std::vector<double>& b) {
  std::vector<double> c(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) c[i * N + j] += a[i * K + k] * b[k * N + j];
  return c;
}

}  // namespace sm::ref
