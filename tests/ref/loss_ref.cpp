// loss_ref.cpp — naive loss references (see loss_ref.h). Uses long double for the
// log-sum-exp instead of subtracting the row maximum.
#include "loss_ref.h"

#include <cmath>

namespace sm {
namespace ref {
namespace {

std::vector<double> mean_over_time(const std::vector<double>& out, int64_t T, int64_t N, int64_t K) {
  std::vector<double> m(N * K, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t t = 0; t < T; ++t) s += out[(t * N + n) * K + k];
      m[n * K + k] = s / T;
    }
  return m;
}

int64_t correct_of(const std::vector<double>& m, int64_t N, int64_t K, const std::vector<int64_t>& labels) {
  int64_t c = 0;
  for (int64_t n = 0; n < N; ++n) {
    bool wins = true;  // label beats every earlier class strictly and ties nothing later that is larger
    for (int64_t k = 0; k < K; ++k) {
      if (k < labels[n] && m[n * K + k] >= m[n * K + labels[n]]) wins = false;
      if (k > labels[n] && m[n * K + k] > m[n * K + labels[n]]) wins = false;
    }
    c += wins;
  }
  return c;
}

}  // namespace

LossRef mean_ce_ref(const std::vector<double>& out, int64_t T, int64_t N, int64_t K,
                    const std::vector<int64_t>& labels) {
  const std::vector<double> m = mean_over_time(out, T, N, K);
  LossRef r;
  r.grad.assign(T * N * K, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    long double z = 0;
    for (int64_t k = 0; k < K; ++k) z += std::exp(static_cast<long double>(m[n * K + k]));
    r.loss += static_cast<double>(std::log(z)) - m[n * K + labels[n]];
    for (int64_t k = 0; k < K; ++k) {
      const double p = static_cast<double>(std::exp(static_cast<long double>(m[n * K + k])) / z);
      const double g = (p - (k == labels[n] ? 1.0 : 0.0)) / (N * T);
      for (int64_t t = 0; t < T; ++t) r.grad[(t * N + n) * K + k] = g;
    }
  }
  r.loss /= N;
  r.correct = correct_of(m, N, K, labels);
  return r;
}

LossRef rate_mse_ref(const std::vector<double>& out, int64_t T, int64_t N, int64_t K,
                     const std::vector<int64_t>& labels) {
  const std::vector<double> m = mean_over_time(out, T, N, K);
  LossRef r;
  r.grad.assign(T * N * K, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const double e = m[n * K + k] - (k == labels[n] ? 1.0 : 0.0);
      r.loss += e * e;
      for (int64_t t = 0; t < T; ++t) r.grad[(t * N + n) * K + k] = 2.0 * e / (N * K * T);
    }
  r.loss /= N * K;
  r.correct = correct_of(m, N, K, labels);
  return r;
}

}  // namespace ref
}  // namespace sm
