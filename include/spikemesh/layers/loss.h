// loss.h — losses over the model output [T, N, K] (time-major):
//  mean_ce : cross-entropy of the mean over T of the logits, averaged over N.
//  rate_mse: MSE between the firing rate (mean over T) and one-hot labels, averaged over
//            N·K (SpikingJelly's F.mse_loss(out_fr, label_onehot)).
// Soft targets (mixing augmentations, data/augment.h): with `soft_targets` f64 [N, K] on the
// host (rows summing to 1) mean_ce is Σ_k target_k·(-log softmax_k) and rate_mse compares the
// rate with the target instead of one-hot labels; `labels` still count the accuracy.
// Accuracy is argmax of the mean over T (first maximum wins). `grad_scale` multiplies the
// returned gradient (data parallel: local batch / global batch).
// Microbatch slots (as Ctx::slot for layers): forward keeps what backward needs in `slot`,
// so several microbatches may be in flight; backward of a slot releases it. A forward into a
// held slot replaces it (evaluation forwards need no backward). Slot 0 is the default.
// Per-class counts (evaluation): with set_per_class(true) forward also counts, per class, the
// samples and the correct ones, and keeps the [N, K] time mean (on a GPU that copies it to the host).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

struct LossResult {
  double loss = 0.0;      // mean over the N samples given
  int64_t correct = 0;    // samples whose argmax equals the label
  int64_t count = 0;      // N
  std::vector<int64_t> class_correct, class_count;  // [K] when Loss::per_class(), else empty
  std::vector<double> time_mean;  // [N, K] row-major, the output's mean over T, when Loss::per_class()
};

class Loss {
 public:
  virtual ~Loss() = default;
  // out: [T, N, K] f32/f64, labels: [N] i64, soft_targets: undefined or host f64 [N, K].
  // Keeps what backward needs in `slot`.
  virtual LossResult forward(const Tensor& out, const Tensor& labels, int slot = 0,
                             const Tensor& soft_targets = Tensor()) = 0;
  // d loss / d out of the forward kept in `slot`, [T, N, K], times grad_scale; releases the
  // slot (a second backward of it is an error until the next forward).
  virtual Tensor backward(double grad_scale = 1.0, int slot = 0) = 0;
  virtual std::string name() const = 0;
  // Evaluation: fill LossResult::class_correct / class_count in every forward from now on.
  void set_per_class(bool on) { per_class_ = on; }
  bool per_class() const { return per_class_; }

 private:
  bool per_class_ = false;
};

std::unique_ptr<Loss> make_loss(const std::string& name);  // "mean_ce" | "rate_mse"; throws Input

// `inner` extended to CUDA outputs (src/layers/loss_cuda.cpp): a CUDA [T, N, K] output (f32,
// bf16 or f16; labels on the host or the device) is reduced on the GPU with the same
// double-precision math (kernels/cuda/loss.h) — one host synchronisation per forward for the
// loss and the correct count — and backward returns the gradient on that device in the
// output's dtype. Host outputs go to `inner` unchanged. Without CUDA: `inner` itself.
std::unique_ptr<Loss> with_cuda_support(std::unique_ptr<Loss> inner);

}  // namespace sm
