// optimizer.h — first-order optimizers (SGD, Adam, AdamW) over a list of Params.
// Semantics are PyTorch's torch.optim (single-tensor path, dampening 0, no amsgrad/maximize):
//   sgd:   g = grad + wd·p;  buf = momentum·buf + g;  d = nesterov ? g + momentum·buf : buf;
//          p -= lr·d                                    (momentum 0: d = g, no state)
//   adam:  g = grad + wd·p;  m = lerp(m, g, 1-β1);  v = β2·v + (1-β2)·g²;
//          p -= (lr / (1-β1^t)) · m / (sqrt(v)/sqrt(1-β2^t) + eps)
//   adamw: p *= 1 - lr·wd, then the adam update with g = grad.
// Invariants: a Param with weight_decay == false is never decayed; state tensors have the
// param's local shape and dtype and are allocated (zero) at construction, so a checkpoint sees
// them before the first step; every element is computed in double and rounded once to the
// param dtype, so results do not depend on the OpenMP thread count.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/param.h"

namespace sm {

struct OptimizerConfig {
  std::string name = "adam";  // "sgd" | "adam" | "adamw"
  double lr = 1e-3;
  double weight_decay = 0.0;
  double momentum = 0.9;  // sgd
  bool nesterov = false;  // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam/adamw
};

// One named state tensor of one parameter, PyTorch names: "momentum_buffer", "exp_avg",
// "exp_avg_sq". `value` points into the optimizer; restore a checkpoint by copying into it.
struct OptimState {
  std::string param_name;
  std::string state_name;
  Tensor* value;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every param from its grad (CPU tensors); increments step_count first, so
  // Adam's bias correction of the k-th step (1-based) uses t = k.
  virtual void step() = 0;

  void set_lr(double lr);  // throws SM_INPUT_ERROR when lr is negative or not finite
  double lr() const { return cfg_.lr; }

  // Number of steps done; set it when resuming from a checkpoint (Adam bias correction).
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps);

  // Every state tensor, params in order, states in a fixed order per param.
  virtual std::vector<OptimState> state() = 0;
  // The state names this optimizer keeps per parameter, in state()'s order within a param
  // (sgd: momentum_buffer, none when momentum == 0; adam/adamw: exp_avg, exp_avg_sq). A
  // function of the configuration alone: the same on a rank that holds no parameter.
  virtual std::vector<std::string> state_names() const = 0;

  // Device-resident stepping, for an update captured once in a CUDA graph and replayed
  // (train/graph_step_cuda.h). For an optimizer that supports it, step() is exactly
  // stage_step() followed by enqueue_update(nullptr):
  //  * stage_step(): increments step_count and writes this step's values (lr, Adam's bias
  //    corrections of step t) to device memory, in stream order (no host synchronisation);
  //  * enqueue_update(skip): the update of every param reading those values from device
  //    memory (capturable); when `skip` (a device i32) is non-null and nonzero at run time,
  //    nothing is written.
  // The others (CPU optimizers) answer false and throw an internal error from both.
  virtual bool supports_captured_update() const { return false; }
  virtual void stage_step();
  virtual void enqueue_update(const int32_t* skip);

  const OptimizerConfig& config() const { return cfg_; }  // cfg.lr is the current lr
  std::vector<Param*>& params() { return params_; }

 protected:
  // Checks every param (non-null, distinct, value and grad defined, f32/f64, same dtype and
  // numel). Config validation is the factory's job.
  Optimizer(const OptimizerConfig& cfg, std::vector<Param*> params);

  // The L2 / decoupled decay coefficient for p: cfg.weight_decay, or 0 if p opts out.
  double decay_of(const Param& p) const { return p.weight_decay ? cfg_.weight_decay : 0.0; }
  // A zero tensor with p's local shape, dtype and device.
  static Tensor zeros_like_param(const Param& p);
  // Throws if p's tensors are not on the CPU (the only device with an update kernel).
  static void require_cpu(const Param& p);

  OptimizerConfig cfg_;
  std::vector<Param*> params_;
  int64_t step_count_ = 0;
};

// Builds the optimizer named by cfg.name. Throws SM_INPUT_ERROR on an unknown name or an
// invalid hyper-parameter (negative lr / weight_decay / momentum / eps, betas outside [0, 1),
// nesterov without momentum, non-finite values).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<Param*> params);

}  // namespace sm
