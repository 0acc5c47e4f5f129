// pp_costs.cpp — dry-run timing of every unit for the pipeline partition (pp_costs.h).
#include "spikemesh/parallel/pipeline/pp_costs.h"

#include <algorithm>

#include "spikemesh/core/allocator.h"
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

UnitDryRun dry_run_units(Model& model, int64_t samples, Ctx ctx, bool timed, DType activations) {
  SM_CHECK(model.finalized(), "dry run of model '" << model.info.name << "' before finalize()");
  const Device dev = model.device();
  const DType dt = activations;  // inputs and output gradients: what the run's units see
  SM_CHECK(dt == model.dtype() || (dev.is_cuda() && (dt == DType::BF16 || dt == DType::F16)),
           "dry run in " << dtype_name(dt) << " of a " << dtype_name(model.dtype()) << " model on " << dev.str());
  const int T = model.info.T;
  if (!timed) samples = 1;
  // BN running statistics change in a training forward: saved and put back.
  std::vector<Tensor> saved;
  for (Buffer* b : model.buffers()) saved.push_back(b->value.defined() ? b->value.clone() : Tensor());
  ctx.training = true;
  ctx.split_wgrad = false;
  ctx.slot = 0;
  UnitDryRun out;
  Shape in{T, samples};
  in.insert(in.end(), model.info.input_shape.begin(), model.info.input_shape.end());
  Tensor x = synthetic(in, dt, dev, 17);  // [T, samples, ...input]
  for (size_t u = 0; u < model.units.size(); ++u) {
    Unit& unit = *model.units[u];
    Tensor y, dy;  // dy: made once, outside the timed region
    double best = 1e300, saved = 0, best_f = 0, best_b = 0, work = 0, kept = 0;
    Allocator& mem = allocator_for(dev);
    const int reps = timed ? 3 : 1;
    for (int rep = 0; rep < reps; ++rep) {
      y = Tensor();
      synchronize(dev);
      const size_t before = mem.current_bytes();
      Timer t;
      unit.reset_state();
      y = unit.forward(x, ctx);  // [T, samples, ...unit output] (local under tp)
      saved = (static_cast<double>(mem.current_bytes()) - static_cast<double>(before) - static_cast<double>(y.nbytes())) /
              1048576.0;
      synchronize(dev);
      const double fwd = t.ms();
      if (rep == reps - 1) {  // x is not needed again: what dropping it does not free, the unit keeps
        const double x_mb = static_cast<double>(x.nbytes()) / 1048576.0;
        const size_t with_x = mem.current_bytes();
        x = Tensor();
        kept = std::max(0.0, x_mb - (static_cast<double>(with_x) - static_cast<double>(mem.current_bytes())) / 1048576.0);
      }
      // The backward also when untimed: it releases what the forward saved in slot 0 (units
      // of other stages never run here again and would keep it).
      if (!dy.defined()) dy = synthetic(y.shape(), dt, dev, 1017 + u);  // [T, samples, ...unit output]
      const size_t peak_before = mem.peak_bytes(), live = mem.current_bytes();
      mem.reset_peak();
      Timer tb;
      unit.backward_input(dy, ctx);
      synchronize(dev);
      const double bwd = tb.ms();
      const double rep_work = (static_cast<double>(mem.peak_bytes()) - static_cast<double>(live)) / 1048576.0;
      mem.raise_peak(peak_before);
      if ((rep > 0 || !timed) && fwd + bwd < best) best = fwd + bwd, best_f = fwd, best_b = bwd, work = rep_work;
    }
    if (timed) {
      out.ms.push_back(best), out.saved_mb.push_back(std::max(0.0, saved));
      out.forward_ms.push_back(best_f), out.backward_ms.push_back(best_b), out.work_mb.push_back(std::max(0.0, work));
      out.input_kept_mb.push_back(kept);
      out.out_mb.push_back(static_cast<double>(y.nbytes()) / 1048576.0);
      out.out_binary.push_back(y.is_binary());
    }
    out.out_shape.push_back(Shape(y.shape().begin() + 2, y.shape().end()));
    x = y;
  }
  model.zero_grad();
  model.reset_state();
  std::vector<Buffer*> bufs = model.buffers();
  for (size_t i = 0; i < bufs.size(); ++i)
    if (saved[i].defined()) bufs[i]->value.copy_from(saved[i]);
  return out;
}

}  // namespace sm
