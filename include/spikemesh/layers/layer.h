// layer.h — the Layer contract (docs/architecture.md §4). Every layer and every unit implements it.
//
//  forward(x, ctx)            x: [T, N, ...per-sample...]; saves what backward needs in
//                             the slot ctx.slot.
//  backward_input(dy, ctx)    (B) returns dx; when !ctx.split_wgrad also accumulates the
//                             parameter gradients and releases the slot. When the caller
//                             marks dy as its own temporary (ctx.dy_owned: a composite's
//                             loop, for a gradient the previous child made; the stage's unit
//                             loop between units; a composite passes the flag on to its first
//                             child, except a Residual and a Graph, which read dy again) and
//                             its handle is the only one (dy.sole_handle()), a CPU
//                             elementwise backward (batch norm, neurons) writes dx over dy.
//  backward_weight(ctx)       (W) accumulates parameter gradients from what B kept; only
//                             called when B ran with ctx.split_wgrad; releases the slot.
//  reset_state()              neuron membranes back to rest (before every microbatch).
//
// The public entry points are non-virtual and dispatch on the tensor's device to the
// *_cpu hooks (always present: the reference) or *_cuda hooks (default: not built). A leaf
// declares its hooks with the macros at the end of this file.
// Parameter gradients ACCUMULATE (+=) into Param::grad; the optimizer zeroes them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/param.h"
#include "spikemesh/layers/sequence_parallel.h"

namespace sm {

// A non-trainable state tensor saved in checkpoints (e.g. BN running_mean), state-dict named.
struct Buffer {
  std::string name;        // full state-dict name, set when the unit is finalised
  std::string local_name;  // e.g. "running_mean"
  Shape shape;             // full logical shape
  Shape local_shape;       // this rank's part (tensor parallelism: a channel shard); empty = shape
  ShardSpec shard;         // how local_shape is cut out of shape (as for a Param)
  double init = 0.0;       // every element starts at this value
  bool integer = false;    // stored as i64 (num_batches_tracked), else the model dtype
  Tensor value;            // local_shape
  const Shape& held_shape() const { return local_shape.empty() ? shape : local_shape; }
};

struct LayerStat {
  std::string layer;  // layer path, e.g. "features.0.2"
  std::string key;    // e.g. "firing_rate"
  double value = 0.0;
};

class Layer {
 public:
  virtual ~Layer() = default;

  Tensor forward(const Tensor& x, Ctx& ctx);
  Tensor backward_input(const Tensor& dy, Ctx& ctx);
  void backward_weight(Ctx& ctx);

  // Defaults: every child's, in order (leaves have none); a leaf with state overrides them.
  virtual void reset_state();
  virtual void collect_stats(std::vector<LayerStat>& out) const;
  // Per-sample output shape for a per-sample input shape (no T, N dims). Throws
  // sm::Error(Input) with a plain explanation when the input does not fit this layer.
  virtual Shape output_shape(const Shape& in) const = 0;
  virtual std::string type() const = 0;  // spec type name, e.g. "conv2d"
  // Whether every output element is exactly 0 or 1, whatever the input: spiking neurons, and
  // composites whose last layer emits spikes, possibly followed by spike-preserving layers
  // (the pipeline sends such activations bit-packed, parallel/pipeline/pp_runtime.h).
  virtual bool emits_spikes() const { return false; }
  // Whether spikes in give spikes out (max-pooling, flatten): such trailing layers are skipped
  // when a composite asks whether it ends in spikes.
  virtual bool preserves_spikes() const { return false; }
  // Whether the layer maps every time step of [T, N, ...] alike and on its own (convolutions,
  // linears, batch norm, pooling, flatten — not neurons, not dropout): T identical input steps
  // give T identical output steps, so one step may stand for all (layers/time_invariant_prefix.h).
  virtual bool same_at_every_time_step() const { return false; }

  // Parameters of this layer (composites: of all children, in order).
  virtual std::vector<Param*> params();
  // Buffers of this layer (composites: of all children, in order).
  virtual std::vector<Buffer*> buffers();
  // Children of composites (empty for leaves); used to name params and walk the tree.
  virtual std::vector<Layer*> children() { return {}; }

  const std::string& name() const { return name_; }
  void set_name(const std::string& n) { name_ = n; }
  // Tensor parallelism's sample sharding (layers/sequence_parallel.h), set by apply_tp_plan:
  // the non-virtual entry points gather a Last layer's output and shard its incoming gradient;
  // the layers themselves do the rest (weight_layer_flow.h: the Start layer's steps).
  void set_sp_link(SpLink link) { sp_ = std::move(link); }
  const SpLink& sp_link() const { return sp_; }

 protected:
  // The device dispatch (and CPU profiling) of forward / backward_input.
  Tensor forward_dispatch(const Tensor& x, Ctx& ctx);
  Tensor backward_dispatch(const Tensor& dy, Ctx& ctx);
  virtual Tensor forward_cpu(const Tensor& x, Ctx& ctx) = 0;
  virtual Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) = 0;
  // Default: every child's W in reverse (composites; nothing for leaves without parameters).
  virtual void backward_weight_cpu(Ctx& ctx);
  // Defaults: "no CUDA implementation in this build" errors; W is a no-op (it only follows a
  // CUDA forward, and every leaf with parameters and a CUDA forward overrides it).
  virtual Tensor forward_cuda(const Tensor& x, Ctx& ctx);
  virtual Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx);
  virtual void backward_weight_cuda(Ctx& ctx) { (void)ctx; }

  // Declares a parameter (storage is bound later by the owning Unit).
  Param& add_param(const std::string& local_name, const Shape& shape, InitSpec init,
                   bool weight_decay = true);
  Param& param(size_t i) { return *own_params_[i]; }
  Buffer& add_buffer(const std::string& local_name, const Shape& shape, double init,
                     bool integer = false);
  Buffer& buffer(size_t i) { return *own_buffers_[i]; }

  std::string name_;
  SpLink sp_;
  std::vector<std::unique_ptr<Param>> own_params_;
  std::vector<std::unique_ptr<Buffer>> own_buffers_;
  Device last_device_ = Device::cpu();  // device of the last forward (W dispatch)
  // A leaf's saved state (slot stores, caches), type-erased so that headers stay free of
  // kernel types: impl_ for its CPU hooks (or both devices where they share the state),
  // cuda_impl_ for CUDA-only state. Composites leave them empty.
  std::shared_ptr<void> impl_, cuda_impl_;
};

using LayerPtr = std::unique_ptr<Layer>;

}  // namespace sm

// ---- hook declarations (inside a Layer subclass, protected) ------------------------------
//  SM_LEAF_HOOKS          forward and backward_input: <layer>.cpp (CPU) and, in a CUDA
//                         build, <layer>_cuda.cpp;
//  SM_LEAF_WEIGHT_HOOKS   backward_weight on both devices (leaves with parameters);
//  SM_ANY_DEVICE_HOOKS    the CPU hooks serve every device (views; composites, whose children
//                         dispatch themselves): declares forward/backward_input_cpu and
//                         defines the CUDA hooks as calls of the CPU ones;
//  SM_DEVICE_FLOW         member templates that hold a leaf's flow once for both devices:
//                         each hook instantiates them with its device's kernels `Dev`
//                         (src/layers/<layer>_flow.h).
#define SM_CPU_HOOKS_                                      \
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override; \
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
#define SM_LEAF_HOOKS                                      \
  SM_CPU_HOOKS_                                            \
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override; \
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
#define SM_LEAF_WEIGHT_HOOKS                   \
  void backward_weight_cpu(Ctx& ctx) override; \
  void backward_weight_cuda(Ctx& ctx) override;
#else
#define SM_LEAF_HOOKS SM_CPU_HOOKS_
#define SM_LEAF_WEIGHT_HOOKS void backward_weight_cpu(Ctx& ctx) override;
#endif
#define SM_ANY_DEVICE_HOOKS                                                                                  \
  SM_CPU_HOOKS_                                                                                             \
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override { return forward_cpu(x, ctx); }                  \
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override { return backward_input_cpu(dy, ctx); } \
  void backward_weight_cuda(Ctx& ctx) override { backward_weight_cpu(ctx); }
#define SM_DEVICE_FLOW                                            \
  template <class Dev>                                            \
  Tensor forward_on(Dev& dev, const Tensor& x, Ctx& ctx);         \
  template <class Dev>                                            \
  Tensor backward_input_on(Dev& dev, const Tensor& dy, Ctx& ctx); \
  template <class Dev>                                            \
  void backward_weight_on(Dev& dev, Ctx& ctx);
