// lr_schedule.cpp — closed-form warm-up + constant / step / cosine schedules (see the header).
#include "spikemesh/optim/lr_schedule.h"

#include <cmath>

#include "spikemesh/core/error.h"

namespace sm {

LrSchedule::LrSchedule(const LrScheduleConfig& cfg) : cfg_(cfg) {
  if (cfg.kind == "constant") {
    kind_ = Kind::Constant;
  } else if (cfg.kind == "step") {
    kind_ = Kind::Step;
  } else if (cfg.kind == "cosine") {
    kind_ = Kind::Cosine;
  } else {
    SM_INPUT_ERROR("unknown lr schedule '" << cfg.kind << "' (expected constant, step or cosine)");
  }
  if (!(std::isfinite(cfg.base_lr) && cfg.base_lr >= 0.0))
    SM_INPUT_ERROR("lr schedule: invalid base_lr " << cfg.base_lr << " (must be >= 0)");
  if (cfg.warmup_steps < 0)
    SM_INPUT_ERROR("lr schedule: invalid warmup_steps " << cfg.warmup_steps << " (must be >= 0)");
  if (!(cfg.warmup_start_factor >= 0.0 && cfg.warmup_start_factor <= 1.0))
    SM_INPUT_ERROR("lr schedule: invalid warmup_start_factor " << cfg.warmup_start_factor
                                                               << " (must be in [0, 1])");
  if (kind_ == Kind::Step) {
    if (cfg.step_size <= 0)
      SM_INPUT_ERROR("lr schedule 'step': invalid step_size " << cfg.step_size << " (must be > 0)");
    if (!(std::isfinite(cfg.gamma) && cfg.gamma > 0.0))
      SM_INPUT_ERROR("lr schedule 'step': invalid gamma " << cfg.gamma << " (must be > 0)");
  }
  if (kind_ == Kind::Cosine) {
    if (cfg.total_steps <= 0)
      SM_INPUT_ERROR("lr schedule 'cosine': invalid total_steps " << cfg.total_steps
                                                                  << " (must be > 0)");
    if (!(std::isfinite(cfg.min_lr) && cfg.min_lr >= 0.0))
      SM_INPUT_ERROR("lr schedule 'cosine': invalid min_lr " << cfg.min_lr << " (must be >= 0)");
  }
}

double LrSchedule::lr_at(int64_t step) const {
  SM_CHECK(step >= 0, "lr schedule asked for negative step " << step);
  const double base = cfg_.base_lr;
  if (step < cfg_.warmup_steps) {
    const double s = cfg_.warmup_start_factor;
    return base * (s + (1.0 - s) * static_cast<double>(step) / static_cast<double>(cfg_.warmup_steps));
  }
  const int64_t u = step - cfg_.warmup_steps;  // steps since the end of warm-up
  switch (kind_) {
    case Kind::Constant:
      return base;
    case Kind::Step:
      return base * std::pow(cfg_.gamma, static_cast<double>(u / cfg_.step_size));
    case Kind::Cosine: {
      const double pi = 3.14159265358979323846;
      const double t_max = static_cast<double>(cfg_.total_steps);
      return cfg_.min_lr +
             (base - cfg_.min_lr) * (1.0 + std::cos(pi * static_cast<double>(u) / t_max)) / 2.0;
    }
  }
  return base;
}

}  // namespace sm
