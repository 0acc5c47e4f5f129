// pp_costs.cpp — dry-run timing of every unit for the pipeline partition (pp_costs.h).
#include "spikemesh/parallel/pp_costs.h"

#include <algorithm>

#include "spikemesh/core/device.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/models/model.h"

namespace sm {

namespace {
// x ~ N(0, 1) of `shape` in the model's dtype on its device.
Tensor synthetic(const Shape& shape, DType dt, Device dev, uint64_t key) {
  Tensor h = Tensor::empty(shape, dt == DType::F64 ? DType::F64 : DType::F32);
  const CounterRng rng(key, "pp-cost-dry-run");
  for (int64_t i = 0; i < h.numel(); ++i) {
    const double v = rng.normal(static_cast<uint64_t>(i));
    if (h.dtype() == DType::F64) h.data<double>()[i] = v;
    else h.data<float>()[i] = static_cast<float>(v);
  }
  return dev.is_cuda() ? h.to(dev).to_dtype(dt) : h;
}
}  // namespace

std::vector<double> measure_unit_costs(Model& model, int64_t samples, Ctx ctx) {
  SM_CHECK(model.finalized(), "unit costs of model '" << model.info.name << "' before finalize()");
  const Device dev = model.device();
  const DType dt = model.dtype();
  const int T = model.info.T;
  const std::vector<Shape> outs = model.unit_output_shapes();
  // BN running statistics change in a training forward: saved and put back.
  std::vector<Tensor> saved;
  for (Buffer* b : model.buffers()) saved.push_back(b->value.defined() ? b->value.clone() : Tensor());
  ctx.training = true;
  ctx.split_wgrad = false;
  ctx.slot = 0;
  std::vector<double> costs;
  for (size_t u = 0; u < model.units.size(); ++u) {
    Shape in{T, samples};
    const Shape& per = u == 0 ? model.info.input_shape : outs[u - 1];
    in.insert(in.end(), per.begin(), per.end());
    Shape out{T, samples};
    out.insert(out.end(), outs[u].begin(), outs[u].end());
    const Tensor x = synthetic(in, dt, dev, 17 + u), dy = synthetic(out, dt, dev, 1017 + u);
    Unit& unit = *model.units[u];
    double best = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      synchronize(dev);
      Timer t;
      unit.reset_state();
      unit.forward(x, ctx);
      unit.backward_input(dy, ctx);
      synchronize(dev);
      if (rep > 0) best = std::min(best, t.ms());
    }
    costs.push_back(best);
  }
  model.zero_grad();
  model.reset_state();
  std::vector<Buffer*> bufs = model.buffers();
  for (size_t i = 0; i < bufs.size(); ++i)
    if (saved[i].defined()) bufs[i]->value.copy_from(saved[i]);
  return costs;
}

}  // namespace sm
