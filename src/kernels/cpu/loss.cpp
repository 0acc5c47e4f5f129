// loss.cpp — CPU loss kernels (see kernels/cpu/loss.h). Sizes are small ([N, K] per
// microbatch), so rows are processed serially except the [T, N, K] passes.
#include "spikemesh/kernels/cpu/loss.h"

#include <cmath>

namespace sm::cpu {

template <typename T>
void time_mean(const T* out, int64_t steps, int64_t n, int64_t k, double* mean) {
  const int64_t nk = n * k;
  const double inv = 1.0 / static_cast<double>(steps);
#pragma omp parallel for schedule(static) if (nk > 4096)
  for (int64_t i = 0; i < nk; ++i) {
    double s = 0.0;
    for (int64_t t = 0; t < steps; ++t) s += static_cast<double>(out[t * nk + i]);
    mean[i] = s * inv;
  }
}

namespace {
// log Σ_j exp(z_j) of one row, with the row maximum subtracted.
double row_log_sum_exp(const double* z, int64_t k) {
  double zmax = z[0];
  for (int64_t j = 1; j < k; ++j) zmax = std::fmax(zmax, z[j]);
  double denom = 0.0;
  for (int64_t j = 0; j < k; ++j) denom += std::exp(z[j] - zmax);
  return zmax + std::log(denom);
}
void write_softmax(const double* z, int64_t k, double lse, double* probs) {
  for (int64_t j = 0; j < k; ++j) probs[j] = std::exp(z[j] - lse);
}
}  // namespace

double cross_entropy_sum(const double* logits, const int64_t* labels, int64_t n, int64_t k,
                         double* probs) {
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const double* z = logits + r * k;
    const double lse = row_log_sum_exp(z, k);
    total += lse - z[labels[r]];
    if (probs) write_softmax(z, k, lse, probs + r * k);
  }
  return total;
}

double onehot_sq_error_sum(const double* rate, const int64_t* labels, int64_t n, int64_t k,
                           double* diff) {
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const double e = rate[r * k + j] - (j == labels[r] ? 1.0 : 0.0);
      total += e * e;
      if (diff) diff[r * k + j] = e;
    }
  }
  return total;
}

double soft_cross_entropy_sum(const double* logits, const double* target, int64_t n, int64_t k, double* probs) {
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const double* z = logits + r * k;
    const double lse = row_log_sum_exp(z, k);
    for (int64_t j = 0; j < k; ++j)
      if (target[r * k + j] != 0.0) total += target[r * k + j] * (lse - z[j]);
    if (probs) write_softmax(z, k, lse, probs + r * k);
  }
  return total;
}

double soft_sq_error_sum(const double* rate, const double* target, int64_t n, int64_t k, double* diff) {
  double total = 0.0;
  for (int64_t i = 0; i < n * k; ++i) {
    const double e = rate[i] - target[i];
    total += e * e;
    if (diff) diff[i] = e;
  }
  return total;
}

namespace {
int64_t argmax_row(const double* s, int64_t k) {  // first maximum wins
  int64_t best = 0;
  for (int64_t j = 1; j < k; ++j)
    if (s[j] > s[best]) best = j;
  return best;
}
}  // namespace

int64_t count_correct(const double* scores, const int64_t* labels, int64_t n, int64_t k) {
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) correct += argmax_row(scores + r * k, k) == labels[r] ? 1 : 0;
  return correct;
}

void count_correct_per_class(const double* scores, const int64_t* labels, int64_t n, int64_t k,
                             int64_t* class_correct, int64_t* class_count) {
  for (int64_t r = 0; r < n; ++r) {
    ++class_count[labels[r]];
    if (argmax_row(scores + r * k, k) == labels[r]) ++class_correct[labels[r]];
  }
}

template <typename T>
void broadcast_over_time(const double* g, int64_t steps, int64_t n, int64_t k, double scale,
                         T* dout) {
  const int64_t nk = n * k;
#pragma omp parallel for schedule(static) if (steps * nk > 4096)
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t i = 0; i < nk; ++i) dout[t * nk + i] = static_cast<T>(g[i] * scale);
}

template void time_mean<float>(const float*, int64_t, int64_t, int64_t, double*);
template void time_mean<double>(const double*, int64_t, int64_t, int64_t, double*);
template void broadcast_over_time<float>(const double*, int64_t, int64_t, int64_t, double, float*);
template void broadcast_over_time<double>(const double*, int64_t, int64_t, int64_t, double, double*);

}  // namespace sm::cpu
