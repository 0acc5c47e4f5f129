// precision.h — mixed precision: the --precision choice and dynamic loss scaling.
//
//  fp32  activations and weights f32 (CPU and CUDA; TF32 is never used unless asked)
//  fp64  everything f64 (CPU only: the exact reference, docs/architecture.md §7)
//  bf16  CUDA: activations and the compute copies of weights in bf16, f32 accumulation in
//        cuDNN/cuBLAS, f32 master weights, gradients and optimizer state, f32 neuron state
//  fp16  as bf16 with f16, plus dynamic loss scaling (LossScaler)
//
// LossScaler (PyTorch GradScaler semantics): the loss gradient is multiplied by scale()
// before backward; unscale_and_check() divides every gradient by it and reports whether all
// are finite; update(finite) halves the scale and counts a skipped step after a non-finite
// gradient, and doubles it after `growth_interval` finite steps in a row. A disabled scaler
// (fp32, bf16, fp64) has scale 1 and accepts every step without looking at the gradients.
// Scales are powers of two, so scaling and unscaling are exact.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

enum class Precision { FP32, FP64, BF16, FP16 };

// "fp32" | "fp64" | "bf16" | "fp16" (also f32, float32, ...); anything else is an Input
// error naming --precision and the valid choices.
Precision precision_from_name(const std::string& name);
const char* precision_name(Precision p);
DType activation_dtype(Precision p);  // F32, F64, BF16, F16
DType master_dtype(Precision p);      // F64 for fp64, else F32
// Input error unless `p` runs on `dev`: the CPU runs fp32/fp64, CUDA runs fp32/bf16/fp16.
void check_precision_for_device(Precision p, const Device& dev);

struct LossScalerConfig {
  bool dynamic = false;          // false: scale stays 1, nothing is checked
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 1.0;        // the scale never drops below this
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& c = {});
  // Dynamic for fp16, disabled otherwise.
  static LossScaler for_precision(Precision p);

  bool enabled() const { return cfg_.dynamic; }
  double scale() const { return scale_; }
  // grad *= 1/scale() for every tensor (f32/f64, CPU or CUDA; CUDA work on the compute
  // stream, one host synchronisation in all); true when every element is finite.
  // Disabled: returns true and touches nothing.
  bool unscale_and_check(const std::vector<Tensor*>& grads);
  // After each step: false (a non-finite gradient, the step was skipped) backs the scale
  // off and counts the skip; true counts towards growth.
  void update(bool finite);

  int64_t skipped_steps() const { return skipped_; }
  int64_t finite_in_row() const { return finite_in_row_; }
  void set_state(double scale, int64_t finite_in_row, int64_t skipped);  // checkpoint resume

 private:
  LossScalerConfig cfg_;
  double scale_ = 1.0;
  int64_t finite_in_row_ = 0;
  int64_t skipped_ = 0;
  Tensor flag_;  // device int [1] per device of the last call (non-finite seen)
};

}  // namespace sm
