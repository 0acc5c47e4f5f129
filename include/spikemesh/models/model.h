// model.h — a model: metadata from its spec, the ordered list of pipeline units and the loss.
// Invariants: units are finalised exactly once (finalize names every layer/parameter by
// its state-dict path and binds the flat buffers); forward maps x [T, N, ...input_shape]
// to [T, N, num_classes]; backward runs the units in reverse and returns dx.
// Parameter names are unique across the model (checked by the spec loader).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/layers/loss.h"
#include "spikemesh/layers/unit.h"

namespace sm {

struct ModelInfo {
  std::string name;
  std::string source;  // spec file path
  Shape input_shape;   // per-sample, per-time-step, e.g. {2,48,48} or {1,28,28}
  int num_classes = 0;
  int T = 0;
  std::string loss;        // "mean_ce" | "rate_mse"
  std::string input_kind;  // "events" (dataset already [T,...]) | "static" (repeat over T)
};

class Model {
 public:
  ModelInfo info;
  std::vector<std::unique_ptr<Unit>> units;  // the pipeline units, in order
  std::unique_ptr<Loss> loss;

  // Finalises every unit (names, flat buffers, init from (seed, parameter name)) on `dev`; on
  // a GPU the loss is wrapped so that it runs on the device (layers/loss.h with_cuda_support).
  void finalize(DType dt, Device dev, uint64_t seed);
  bool finalized() const { return finalized_; }
  DType dtype() const;
  Device device() const { return device_; }

  Tensor forward(const Tensor& x, Ctx& ctx);     // x [T, N, ...input_shape] -> [T, N, num_classes]
  Tensor backward(const Tensor& dy, Ctx& ctx);   // through all units in reverse; returns dx
  void reset_state();
  void zero_grad();

  std::vector<Param*> params();
  std::vector<Buffer*> buffers();
  std::vector<LayerStat> stats();  // every neuron layer's firing rate etc.
  int64_t num_parameters() const;  // logical (unsharded) element count
  // Per-sample output shape of every unit for the model's input shape.
  std::vector<Shape> unit_output_shapes() const;
  // Table: unit, layer path, type, output shape [per sample], #params.
  std::string summary();

 private:
  bool finalized_ = false;
  DType dtype_ = DType::F32;
  Device device_ = Device::cpu();
};

}  // namespace sm
