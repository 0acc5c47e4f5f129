// loss.h — CPU kernels for losses over a time-major model output [T, N, K].
// The mean over T is formed in double; per-sample losses and gradients are computed in
// double from it; only the final gradient is written in the output's scalar type.
// Invariant: every function is a pure function of its arguments (no hidden state).
#pragma once
#include <cstdint>

namespace sm::cpu {

// mean[n·K + k] = (1/T) Σ_t out[t, n, k]. out: [T, N, K]; mean: [N, K] double.
template <typename T>
void time_mean(const T* out, int64_t steps, int64_t n, int64_t k, double* mean);

// Cross-entropy of logits [N, K] against labels [N] (log-sum-exp with the row maximum
// subtracted). Returns Σ_n loss_n; writes softmax probabilities [N, K] when probs != null.
double cross_entropy_sum(const double* logits, const int64_t* labels, int64_t n, int64_t k,
                         double* probs);

// Σ_{n,k} (rate - onehot(label))²; writes the difference [N, K] when diff != null.
double onehot_sq_error_sum(const double* rate, const int64_t* labels, int64_t n, int64_t k,
                           double* diff);

// Soft targets (mixing augmentations): target [N, K] rows of class weights summing to 1.
// Σ_n Σ_k target[n, k]·(lse_n - logits[n, k]); writes softmax probabilities when probs != null.
double soft_cross_entropy_sum(const double* logits, const double* target, int64_t n, int64_t k, double* probs);
// Σ_{n,k} (rate - target)²; writes the difference [N, K] when diff != null.
double soft_sq_error_sum(const double* rate, const double* target, int64_t n, int64_t k, double* diff);

// Number of rows whose argmax (first maximum wins) equals the label.
int64_t count_correct(const double* scores, const int64_t* labels, int64_t n, int64_t k);

// Per class c (labels in [0, k)): class_count[c] += the rows labelled c, class_correct[c] += those
// of them whose argmax (as count_correct) is c. Both arrays hold k counters (accumulated into).
void count_correct_per_class(const double* scores, const int64_t* labels, int64_t n, int64_t k,
                             int64_t* class_correct, int64_t* class_count);

// dout[t, n, k] = g[n, k] · scale for every t (the gradient of a mean over T carries the
// 1/T inside `scale`). g: [N, K] double; dout: [T, N, K].
template <typename T>
void broadcast_over_time(const double* g, int64_t steps, int64_t n, int64_t k, double scale,
                         T* dout);

}  // namespace sm::cpu
