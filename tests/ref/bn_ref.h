// bn_ref.h — naive double-precision batch-norm reference for tests only. Tensors are
// flat vectors viewed as [B, C, S] (B = T·N, S = spatial size). Written from the textbook
// staged equations (two-pass mean/variance; backward through x̂, σ² and μ separately),
// deliberately unlike the production kernel's shifted one-pass sums and fused formula.
#pragma once
#include <cstdint>
#include <vector>

namespace sm {
namespace ref {

struct BnRefForward {
  std::vector<double> y;     // [B, C, S]
  std::vector<double> mean;  // [C] batch mean
  std::vector<double> var;   // [C] biased batch variance
};

BnRefForward bn_forward_train_ref(const std::vector<double>& x, int64_t B, int64_t C, int64_t S,
                                  const std::vector<double>& gamma, const std::vector<double>& beta,
                                  double eps);

std::vector<double> bn_forward_eval_ref(const std::vector<double>& x, int64_t B, int64_t C, int64_t S,
                                        const std::vector<double>& gamma, const std::vector<double>& beta,
                                        const std::vector<double>& running_mean,
                                        const std::vector<double>& running_var, double eps);

// PyTorch's running-statistics update (unbiased variance, count = B·S > 1).
void bn_update_running_ref(std::vector<double>& running_mean, std::vector<double>& running_var,
                           const std::vector<double>& mean, const std::vector<double>& biased_var,
                           int64_t count, double momentum);

struct BnRefBackward {
  std::vector<double> dx;      // [B, C, S]
  std::vector<double> dgamma;  // [C]
  std::vector<double> dbeta;   // [C]
};

// Training-mode backward (batch statistics recomputed from x).
BnRefBackward bn_backward_train_ref(const std::vector<double>& x, const std::vector<double>& dy,
                                    int64_t B, int64_t C, int64_t S, const std::vector<double>& gamma,
                                    double eps);

}  // namespace ref
}  // namespace sm
