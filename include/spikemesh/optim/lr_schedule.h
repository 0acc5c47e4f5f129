// lr_schedule.h — learning rate as a closed-form function of the optimizer step.
// lr_at(t), t = optimizer steps done so far (0-based: lr_at(0) is the lr of the first step):
//   warm-up, t < W (W = warmup_steps > 0):  base·(s + (1 - s)·t/W)      (PyTorch LinearLR, s =
//                                            warmup_start_factor, end factor 1, total_iters W)
//   afterwards, with u = t - W:
//     constant: base
//     step:     base·gamma^floor(u / step_size)                        (PyTorch StepLR)
//     cosine:   min + (base - min)·(1 + cos(pi·u/T))/2, T = total_steps (PyTorch
//               CosineAnnealingLR closed form; like PyTorch it is periodic past u = T, so set
//               total_steps to the number of steps after warm-up)
// Invariant: the config is validated in the constructor (SM_INPUT_ERROR); lr_at is pure.
#pragma once
#include <cstdint>
#include <string>

namespace sm {

struct LrScheduleConfig {
  std::string kind = "constant";  // "constant" | "step" | "cosine"
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;       // linear warm-up from base_lr*warmup_start_factor to base_lr
  double warmup_start_factor = 0.0;
  int64_t total_steps = 0;        // cosine: T_max after warm-up
  int64_t step_size = 0;          // step: decay every step_size steps
  double gamma = 0.1;             // step
  double min_lr = 0.0;            // cosine eta_min
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleConfig& cfg);
  double lr_at(int64_t step) const;
  const LrScheduleConfig& config() const { return cfg_; }

 private:
  enum class Kind { Constant, Step, Cosine };
  LrScheduleConfig cfg_;
  Kind kind_ = Kind::Constant;
};

}  // namespace sm
