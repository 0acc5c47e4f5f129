// loss_ref.h — naive double-precision references of the losses over [T, N, K] outputs,
// for tests only: loss = L(mean_t out), with the gradient w.r.t. every out[t, n, k]
// written from the closed form (softmax - onehot)/(N·T) and 2(rate - onehot)/(N·K·T).
#pragma once
#include <cstdint>
#include <vector>

namespace sm {
namespace ref {

struct LossRef {
  double loss = 0;
  int64_t correct = 0;
  std::vector<double> grad;  // [T, N, K] d loss / d out
};

LossRef mean_ce_ref(const std::vector<double>& out, int64_t T, int64_t N, int64_t K,
                    const std::vector<int64_t>& labels);
LossRef rate_mse_ref(const std::vector<double>& out, int64_t T, int64_t N, int64_t K,
                     const std::vector<int64_t>& labels);

}  // namespace ref
}  // namespace sm
