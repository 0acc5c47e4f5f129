// layer.h — the Layer contract (DESIGN §4). Every layer and every unit implements it.
//
//  forward(x, ctx)            x: [T, N, ...per-sample...]; saves what backward needs in
//                             the slot ctx.slot.
//  backward_input(dy, ctx)    (B) returns dx; when !ctx.split_wgrad also accumulates the
//                             parameter gradients and releases the slot.
//  backward_weight(ctx)       (W) accumulates parameter gradients from what B kept; only
//                             called when B ran with ctx.split_wgrad; releases the slot.
//  reset_state()              neuron membranes back to rest (before every microbatch).
//
// The public entry points are non-virtual and dispatch on the tensor's device to the
// *_cpu hooks (always present: the reference) or *_cuda hooks (default: not built).
// Parameter gradients ACCUMULATE (+=) into Param::grad; the optimizer zeroes them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/param.h"

namespace sm {

// A non-trainable state tensor saved in checkpoints (e.g. BN running_mean), state-dict named.
struct Buffer {
  std::string name;        // full state-dict name, set when the unit is finalised
  std::string local_name;  // e.g. "running_mean"
  Shape shape;
  double init = 0.0;       // every element starts at this value
  bool integer = false;    // stored as i64 (num_batches_tracked), else the model dtype
  Tensor value;
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

  virtual void reset_state() {}
  virtual void collect_stats(std::vector<LayerStat>& out) const { (void)out; }
  // Per-sample output shape for a per-sample input shape (no T, N dims). Throws
  // sm::Error(Input) with a plain explanation when the input does not fit this layer.
  virtual Shape output_shape(const Shape& in) const = 0;
  virtual std::string type() const = 0;  // spec type name, e.g. "conv2d"

  // Parameters of this layer (composites: of all children, in order).
  virtual std::vector<Param*> params();
  // Buffers of this layer (composites: of all children, in order).
  virtual std::vector<Buffer*> buffers();
  // Children of composites (empty for leaves); used to name params and walk the tree.
  virtual std::vector<Layer*> children() { return {}; }

  const std::string& name() const { return name_; }
  void set_name(const std::string& n) { name_ = n; }

 protected:
  virtual Tensor forward_cpu(const Tensor& x, Ctx& ctx) = 0;
  virtual Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) = 0;
  virtual void backward_weight_cpu(Ctx& ctx) { (void)ctx; }
  virtual Tensor forward_cuda(const Tensor& x, Ctx& ctx);
  virtual Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx);
  virtual void backward_weight_cuda(Ctx& ctx);

  // Declares a parameter (storage is bound later by the owning Unit).
  Param& add_param(const std::string& local_name, const Shape& shape, InitSpec init,
                   bool weight_decay = true);
  Param& param(size_t i) { return *own_params_[i]; }
  Buffer& add_buffer(const std::string& local_name, const Shape& shape, double init,
                     bool integer = false);
  Buffer& buffer(size_t i) { return *own_buffers_[i]; }

  std::string name_;
  std::vector<std::unique_ptr<Param>> own_params_;
  std::vector<std::unique_ptr<Buffer>> own_buffers_;
  Device last_device_ = Device::cpu();  // device of the last forward (W dispatch)
};

using LayerPtr = std::unique_ptr<Layer>;

}  // namespace sm
