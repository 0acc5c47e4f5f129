// stage.h — a Stage: the contiguous range [first, end) of a model's units that one rank runs
// (the whole model when pp = 1), and THE unit loop of spikemesh: every forward and backward
// of every layout (one rank, dp/ZeRO/FSDP, later tp and pp) goes through Stage::forward,
// backward_input and backward_weight. Model::forward/backward are this loop over the whole model.
//
// Hooks: a parallel strategy observes the loop through UnitHooks (gather parameters before a
// unit runs, start a gradient reduction once a unit's gradients are final, ...). Hook indices
// are LOCAL to the stage (0 .. size()-1).
//
// Microbatches: ctx.slot selects where every layer keeps what backward needs, so several
// microbatches can be in flight (F of slot 0, F of slot 1, B of slot 1, ...).
// Backward split: with ctx.split_wgrad, backward_input (B) computes only input gradients and
// backward_weight (W) later accumulates the parameter gradients; after_backward(k) then fires
// after unit k's W. Without it, backward_input computes both and after_backward fires at once.
#pragma once
#include <cstddef>
#include <vector>

#include "spikemesh/layers/unit.h"

namespace sm {

class Model;

// Observes the unit loop; indices are local to the stage. Default: nothing.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(size_t unit, bool training) {}
  virtual void after_forward(size_t unit, bool training) {}
  virtual void before_backward(size_t unit) {}
  virtual void after_backward(size_t unit) {}
};

class Stage {
 public:
  // Units [first, end) of `model` (which must outlive the stage).
  Stage(Model& model, size_t first, size_t end);
  Model& model() { return model_; }
  size_t first() const { return first_; }
  size_t end() const { return end_; }
  size_t size() const { return end_ - first_; }
  bool is_first() const;  // holds the model's input (unit 0)
  bool is_last() const;   // holds the model's output (and the loss)
  Unit& unit(size_t k);   // local index

  std::vector<Param*> params();
  std::vector<Buffer*> buffers();
  std::vector<LayerStat> stats();
  void reset_state();  // every neuron of the stage back to rest (before every microbatch)
  void zero_grad();

  // x: [T, N, ...] -> the stage's output [T, N, ...]; the first stage checks x against the
  // model's input shape (Input error naming the model).
  Tensor forward(const Tensor& x, Ctx& ctx, UnitHooks* hooks = nullptr);
  // dy: gradient of the stage's output -> gradient of its input (see the header on W).
  Tensor backward_input(const Tensor& dy, Ctx& ctx, UnitHooks* hooks = nullptr);
  // Only after a backward_input with ctx.split_wgrad: every unit's W, last unit first.
  void backward_weight(Ctx& ctx, UnitHooks* hooks = nullptr);

 private:
  Model& model_;
  size_t first_, end_;
};

}  // namespace sm
