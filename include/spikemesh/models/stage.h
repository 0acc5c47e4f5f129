// stage.h — a Stage: the units of a model that one rank runs, as one or more CHUNKS — each a
// contiguous range [begin, end) of units, in model order (the whole model as one chunk when
// pp = 1; one chunk per virtual pipeline stage held by the rank otherwise) — and THE unit loop
// of spikemesh: every forward and backward of every layout (one rank, dp/ZeRO/FSDP, tp, pp)
// goes through Stage::forward, backward_input and backward_weight (whole stage) or their
// per-chunk forms (one logical pipeline stage). Model::forward/backward are this loop over the
// whole model.
//
// Hooks: a parallel strategy observes the loop through UnitHooks (gather parameters before a
// unit runs, start a gradient reduction once a unit's gradients are final, ...). Hook indices
// are LOCAL to the stage (0 .. size()-1, chunks concatenated in order).
//
// Microbatches: ctx.slot selects where every layer keeps what backward needs, so several
// microbatches can be in flight (F of slot 0, F of slot 1, B of slot 1, ...).
// Backward split: with ctx.split_wgrad, backward_input (B) computes only input gradients and
// backward_weight (W) later accumulates the parameter gradients; after_backward(k) then fires
// after unit k's W. Without it, backward_input computes both and after_backward fires at once.
// memopt piece chains (models/piece_chain.h): the forward loop runs a chain's units together
// when it reaches its first unit (training, in pieces), the backward loop when it reaches its
// last; their W does nothing (the chain's backward accumulated it).
// Invariant: chunks are non-empty, ordered and disjoint.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "spikemesh/layers/unit.h"
#include "spikemesh/models/piece_chain.h"

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
  // Units [first, end) of `model` (which must outlive the stage): one chunk.
  Stage(Model& model, size_t first, size_t end);
  // Several chunks [begin, end) of model units, ordered and disjoint (empty ones are dropped).
  Stage(Model& model, const std::vector<std::pair<size_t, size_t>>& chunks);
  Model& model() { return model_; }
  size_t size() const { return global_.size(); }
  bool is_first() const;  // holds the model's input (unit 0)
  bool is_last() const;   // holds the model's output (and the loss)
  Unit& unit(size_t k);   // local index
  size_t global_index(size_t k) const { return global_[k]; }

  size_t chunks() const { return chunk_begin_.size(); }
  // Local indices [begin, end) of chunk c.
  std::pair<size_t, size_t> chunk_local(size_t c) const;

  std::vector<Param*> params();
  std::vector<Buffer*> buffers();
  std::vector<LayerStat> stats();
  void reset_state();  // every neuron of the stage back to rest (before every microbatch)
  void reset_state(size_t chunk);
  void zero_grad();

  // memopt's piece chains (set after the units' own memopt segments; checked against them).
  void set_memopt_chains(std::vector<PieceChain> chains);
  const std::vector<PieceChain>& memopt_chains() const { return chains_; }

  // x: [T, N, ...] -> the stage's output [T, N, ...]; the first stage checks x against the
  // model's input shape (Input error naming the model). Runs every chunk in order (pp = 1).
  Tensor forward(const Tensor& x, Ctx& ctx, UnitHooks* hooks = nullptr);
  // dy: gradient of the stage's output -> gradient of its input (see the header on W); with
  // ctx.input_grad_unused on the first stage, the model's input gets none (undefined).
  Tensor backward_input(const Tensor& dy, Ctx& ctx, UnitHooks* hooks = nullptr);
  // Only after a backward_input with ctx.split_wgrad: every unit's W, last unit first.
  void backward_weight(Ctx& ctx, UnitHooks* hooks = nullptr);

  // The same for one chunk (one logical pipeline stage).
  Tensor forward_chunk(size_t c, const Tensor& x, Ctx& ctx, UnitHooks* hooks = nullptr);
  Tensor backward_input_chunk(size_t c, const Tensor& dy, Ctx& ctx, UnitHooks* hooks = nullptr);
  void backward_weight_chunk(size_t c, Ctx& ctx, UnitHooks* hooks = nullptr);

 private:
  Model& model_;
  std::vector<size_t> global_;       // model unit index of each local unit
  std::vector<size_t> chunk_begin_;  // local index where each chunk starts
  std::vector<PieceChain> chains_;   // ordered, disjoint
  const PieceChain* chain_starting_at(size_t k) const;  // the chain whose first unit is k, if any
  const PieceChain* chain_ending_at(size_t k) const;    // the chain whose last unit is k, if any
};

}  // namespace sm
