// stage.cpp — the unit loop over a contiguous range of a model's units (models/stage.h).
#include "spikemesh/models/stage.h"

#include <algorithm>

#include "spikemesh/models/model.h"

namespace sm {

Stage::Stage(Model& model, size_t first, size_t end) : model_(model), first_(first), end_(end) {
  SM_CHECK(first <= end && end <= model.units.size(),
           "stage [" << first << ", " << end << ") of model '" << model.info.name << "' with " << model.units.size()
                     << " units");
}

bool Stage::is_first() const { return first_ == 0; }
bool Stage::is_last() const { return end_ == model_.units.size(); }
Unit& Stage::unit(size_t k) { return *model_.units[first_ + k]; }

std::vector<Param*> Stage::params() {
  std::vector<Param*> out;
  for (size_t k = 0; k < size(); ++k)
    for (Param* p : unit(k).params()) out.push_back(p);
  return out;
}

std::vector<Buffer*> Stage::buffers() {
  std::vector<Buffer*> out;
  for (size_t k = 0; k < size(); ++k)
    for (Buffer* b : unit(k).buffers()) out.push_back(b);
  return out;
}

std::vector<LayerStat> Stage::stats() {
  std::vector<LayerStat> out;
  for (size_t k = 0; k < size(); ++k) unit(k).collect_stats(out);
  return out;
}

void Stage::reset_state() {
  for (size_t k = 0; k < size(); ++k) unit(k).reset_state();
}

void Stage::zero_grad() {
  for (size_t k = 0; k < size(); ++k) unit(k).zero_grad();
}

Tensor Stage::forward(const Tensor& x, Ctx& ctx, UnitHooks* hooks) {
  SM_CHECK(model_.finalized(), "model '" << model_.info.name << "' used before finalize()");
  if (is_first()) {
    const Shape& s = x.shape();
    Shape per_sample(s.begin() + std::min<size_t>(2, s.size()), s.end());
    if (s.size() < 2 || per_sample != model_.info.input_shape)
      SM_INPUT_ERROR("model '" << model_.info.name << "' expects input [T, N, "
                               << shape_str(model_.info.input_shape).substr(1) << ", got " << shape_str(s));
  }
  Tensor h = x;  // [T, N, ...]
  for (size_t k = 0; k < size(); ++k) {
    if (hooks) hooks->before_forward(k, ctx.training);
    h = unit(k).forward(h, ctx);
    if (hooks) hooks->after_forward(k, ctx.training);
  }
  return h;  // [T, N, ...stage output]
}

Tensor Stage::backward_input(const Tensor& dy, Ctx& ctx, UnitHooks* hooks) {
  Tensor g = dy;  // [T, N, ...stage output]
  for (size_t k = size(); k-- > 0;) {
    if (hooks) hooks->before_backward(k);
    g = unit(k).backward_input(g, ctx);
    if (hooks && !ctx.split_wgrad) hooks->after_backward(k);
  }
  return g;  // [T, N, ...stage input]
}

void Stage::backward_weight(Ctx& ctx, UnitHooks* hooks) {
  SM_CHECK(ctx.split_wgrad, "backward_weight without split_wgrad: backward_input already accumulated the weights");
  for (size_t k = size(); k-- > 0;) {
    unit(k).backward_weight(ctx);
    if (hooks) hooks->after_backward(k);
  }
}

}  // namespace sm
