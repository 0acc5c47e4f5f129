// stage.cpp — the unit loop over one or more contiguous ranges of a model's units
// (models/stage.h).
#include "spikemesh/models/stage.h"

#include <algorithm>

#include "spikemesh/models/model.h"

namespace sm {

Stage::Stage(Model& model, size_t first, size_t end) : Stage(model, {{first, end}}) {}

Stage::Stage(Model& model, const std::vector<std::pair<size_t, size_t>>& chunks) : model_(model) {
  size_t prev_end = 0;
  for (const auto& [b, e] : chunks) {
    SM_CHECK(b <= e && e <= model.units.size() && (global_.empty() || b >= prev_end),
             "stage chunk [" << b << ", " << e << ") of model '" << model.info.name << "' with " << model.units.size()
                             << " units");
    if (b == e) continue;
    chunk_begin_.push_back(global_.size());
    for (size_t u = b; u < e; ++u) global_.push_back(u);
    prev_end = e;
  }
}

bool Stage::is_first() const { return !global_.empty() && global_.front() == 0; }
bool Stage::is_last() const { return !global_.empty() && global_.back() + 1 == model_.units.size(); }
Unit& Stage::unit(size_t k) { return *model_.units[global_[k]]; }

std::pair<size_t, size_t> Stage::chunk_local(size_t c) const {
  SM_CHECK(c < chunks(), "chunk " << c << " of a stage with " << chunks());
  return {chunk_begin_[c], c + 1 < chunks() ? chunk_begin_[c + 1] : global_.size()};
}

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

void Stage::reset_state(size_t c) {
  const auto [b, e] = chunk_local(c);
  for (size_t k = b; k < e; ++k) unit(k).reset_state();
}

void Stage::zero_grad() {
  for (size_t k = 0; k < size(); ++k) unit(k).zero_grad();
}

void Stage::set_memopt_chains(std::vector<PieceChain> chains) {
  std::sort(chains.begin(), chains.end(), [](const PieceChain& a, const PieceChain& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < chains.size(); ++i) {
    const std::string why = piece_chain_problem(*this, chains[i]);
    SM_CHECK(why.empty(), "memopt chain [" << chains[i].begin << ", " << chains[i].end << "): " << why);
    SM_CHECK(i == 0 || chains[i - 1].end <= chains[i].begin, "memopt chains overlap at unit " << chains[i].begin);
  }
  chains_ = std::move(chains);
}

const PieceChain* Stage::chain_ending_at(size_t k) const {
  for (const PieceChain& ch : chains_)
    if (ch.end == k + 1) return &ch;
  return nullptr;
}

const PieceChain* Stage::chain_starting_at(size_t k) const {
  for (const PieceChain& ch : chains_)
    if (ch.begin == k) return &ch;
  return nullptr;
}

Tensor Stage::forward(const Tensor& x, Ctx& ctx, UnitHooks* hooks) {
  Tensor h = x;  // [T, N, ...]
  for (size_t c = 0; c < chunks(); ++c) h = forward_chunk(c, h, ctx, hooks);
  return h;  // [T, N, ...stage output]
}

Tensor Stage::backward_input(const Tensor& dy, Ctx& ctx, UnitHooks* hooks) {
  Tensor g = dy;  // [T, N, ...stage output]
  for (size_t c = chunks(); c-- > 0;) g = backward_input_chunk(c, g, ctx, hooks);
  return g;  // [T, N, ...stage input]
}

void Stage::backward_weight(Ctx& ctx, UnitHooks* hooks) {
  for (size_t c = chunks(); c-- > 0;) backward_weight_chunk(c, ctx, hooks);
}

Tensor Stage::forward_chunk(size_t c, const Tensor& x, Ctx& ctx, UnitHooks* hooks) {
  SM_CHECK(model_.finalized(), "model '" << model_.info.name << "' used before finalize()");
  const auto [b, e] = chunk_local(c);
  if (global_[b] == 0) {
    const Shape& s = x.shape();
    Shape per_sample(s.begin() + std::min<size_t>(2, s.size()), s.end());
    if (s.size() < 2 || per_sample != model_.info.input_shape)
      SM_INPUT_ERROR("model '" << model_.info.name << "' expects input [T, N, "
                               << shape_str(model_.info.input_shape).substr(1) << ", got " << shape_str(s));
  }
  Tensor h = x;  // [T, N, ...]
  for (size_t k = b; k < e; ++k) {
    const PieceChain* ch = chain_starting_at(k);
    if (ch && ch->forward_in_pieces && ctx.training) {  // its units together, in pieces
      h = piece_chain_forward(*this, *ch, h, ctx, hooks);
      k = ch->end - 1;
      continue;
    }
    if (hooks) hooks->before_forward(k, ctx.training);
    // the model's first unit may merge repeated input steps (layers/time_invariant_prefix.h)
    ctx.merge_repeated_steps = global_[k] == 0 && (!ctx.training || ctx.model_input_grad_unused);
    h = unit(k).forward(h, ctx);
    ctx.merge_repeated_steps = false;
    if (hooks) hooks->after_forward(k, ctx.training);
  }
  return h;  // [T, N, ...chunk output]
}

Tensor Stage::backward_input_chunk(size_t c, const Tensor& dy, Ctx& ctx, UnitHooks* hooks) {
  const auto [b, e] = chunk_local(c);
  const bool owned = ctx.dy_owned, unused = ctx.input_grad_unused;
  Tensor g;  // [T, N, ...] the gradient between units: the loop's own, written over where it can be
  for (size_t k = e; k-- > b;) {
    const Tensor& in = k + 1 < e ? g : dy;
    if (const PieceChain* ch = chain_ending_at(k)) {  // its units together, in pieces
      ctx.input_grad_unused = unused && global_[ch->begin] == 0;
      g = piece_chain_backward(*this, *ch, in, ctx, hooks);
      k = ch->begin;
      continue;
    }
    ctx.input_grad_unused = unused && global_[k] == 0;  // the model's input: its gradient is not wanted
    if (hooks) hooks->before_backward(k);
    ctx.dy_owned = k + 1 < e;  // the chunk's first gets the caller's dy, never written over
    g = unit(k).backward_input(in, ctx);
    SM_CHECK(g.defined() || ctx.input_grad_unused, "unit " << global_[k] << " made no input gradient");
    if (hooks && !ctx.split_wgrad) hooks->after_backward(k);
  }
  ctx.dy_owned = owned;
  ctx.input_grad_unused = unused;
  return g;  // [T, N, ...chunk input]
}

void Stage::backward_weight_chunk(size_t c, Ctx& ctx, UnitHooks* hooks) {
  SM_CHECK(ctx.split_wgrad, "backward_weight without split_wgrad: backward_input already accumulated the weights");
  const auto [b, e] = chunk_local(c);
  for (size_t k = e; k-- > b;) {
    if (!chain_containing(chains_, k)) unit(k).backward_weight(ctx);
    if (hooks) hooks->after_backward(k);
  }
}

}  // namespace sm
