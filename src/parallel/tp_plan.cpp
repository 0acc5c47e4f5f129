// tp_plan.cpp — deriving, applying and printing the tensor-parallel plan (tp_plan.h).
#include "spikemesh/parallel/tp_plan.h"

#include <cstdio>
#include <sstream>

#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/dataflow_graph.h"
#include "spikemesh/layers/flatten.h"
#include "spikemesh/layers/mean.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/sequential.h"
#include "spikemesh/layers/spiking_attention.h"
#include "spikemesh/layers/unit.h"
#include "spikemesh/layers/weight_layer.h"
#include "spikemesh/models/model.h"

namespace sm {

const char* tp_role_name(TpRole r) {
  switch (r) {
    case TpRole::Replicated: return "replicated";
    case TpRole::Colwise: return "colwise";
    case TpRole::Rowwise: return "rowwise";
    case TpRole::Local: return "local";
    case TpRole::ColwiseGather: return "colwise/ag";
  }
  return "?";
}

int64_t TpPlan::sharded_layers() const {
  int64_t n = 0;
  for (const TpLayerPlan& l : layers) n += l.role != TpRole::Replicated;
  return n;
}

namespace {
int split_dim_of(const TpLayerPlan& l, size_t k);
}  // namespace

TpPlan::Traffic TpPlan::layer_traffic(const TpLayerPlan& l, int64_t samples, int64_t T, int64_t elem_bytes,
                                      int64_t grad_bytes) const {
  Traffic t;
  if (tp <= 1) return t;
  const int64_t unit = samples * T * elem_bytes;  // bytes per per-sample element
  const bool shard = l.sp_region >= 0 && samples % tp == 0;
  auto add = [&](int64_t& calls, int64_t& bytes, int64_t elements, int64_t elem, int64_t n_calls = 1) {
    if (elements <= 0) return;
    calls += n_calls;
    bytes += elements * elem;
  };
  add(t.all_reduce_calls, t.all_reduce_bytes, l.forward_all_reduce, unit);
  add(t.all_reduce_calls, t.all_reduce_bytes, l.backward_all_reduce, unit);
  add(t.all_gather_calls, t.all_gather_bytes, l.forward_channel_gather, unit);
  if (shard) {
    // one call per time step (layers/sequence_parallel.h)
    add(t.reduce_scatter_calls, t.reduce_scatter_bytes, l.forward_reduce_scatter, unit, T);
    add(t.reduce_scatter_calls, t.reduce_scatter_bytes, l.backward_reduce_scatter, unit, T);
    add(t.all_gather_calls, t.all_gather_bytes, l.forward_all_gather, unit, T);
    add(t.all_gather_calls, t.all_gather_bytes, l.backward_all_gather, unit, T);
    add(t.all_reduce_calls, t.all_reduce_bytes, l.stats_forward_doubles, 8);
    add(t.all_reduce_calls, t.all_reduce_bytes, l.stats_backward_doubles, 8);
  }
  const bool member = sp_member(l.sp_role);
  if (l.role == TpRole::Local || (member && shard)) {  // whole parameters with partial gradients
    const std::vector<Param*> ps = l.layer->params();
    for (size_t k = 0; k < ps.size(); ++k)
      if (l.role != TpRole::Local || split_dim_of(l, k) < 0) add(t.all_reduce_calls, t.all_reduce_bytes, shape_numel(ps[k]->shape), grad_bytes);
  }
  if (!shard) {
    add(t.all_reduce_calls, t.all_reduce_bytes, l.sp_all_reduce_forward, unit);
    add(t.all_reduce_calls, t.all_reduce_bytes, l.sp_all_reduce_backward, unit);
  }
  const double f = static_cast<double>(tp - 1) / tp;
  t.sent_bytes = 2.0 * f * t.all_reduce_bytes + f * (t.reduce_scatter_bytes + t.all_gather_bytes);
  return t;
}

TpPlan::Traffic TpPlan::traffic(int64_t samples, int64_t T, int64_t elem_bytes, int64_t grad_bytes) const {
  Traffic sum;
  for (const TpLayerPlan& l : layers) {
    const Traffic t = layer_traffic(l, samples, T, elem_bytes, grad_bytes);
    sum.all_reduce_calls += t.all_reduce_calls, sum.all_reduce_bytes += t.all_reduce_bytes;
    sum.reduce_scatter_calls += t.reduce_scatter_calls, sum.reduce_scatter_bytes += t.reduce_scatter_bytes;
    sum.all_gather_calls += t.all_gather_calls, sum.all_gather_bytes += t.all_gather_bytes;
    sum.sent_bytes += t.sent_bytes;
  }
  return sum;
}

namespace {

// One entry of a layer sequence: a leaf layer, or a compound (residual) with its own body.
struct Item {
  size_t plan_index = 0;      // leaves: index into plan.layers
  bool compound = false;      // a residual: its body is planned on its own
  std::vector<Item> body;
};

bool is_weight(const Layer* l) { return dynamic_cast<const WeightLayer*>(l) != nullptr; }

// Flattens units and plain sequentials into `out`; residuals become compound items; every
// leaf (graphs included: planned as one replicated leaf) gets its TpLayerPlan.
void flatten(Layer* l, const std::string& path, int unit, Shape& cur, TpPlan& plan, std::vector<Item>& out) {
  const bool residual = dynamic_cast<Residual*>(l) != nullptr;
  const bool sequential = dynamic_cast<Sequential*>(l) != nullptr;
  if (residual || sequential) {
    Item compound;
    compound.compound = true;
    std::vector<Item>& dst = residual ? compound.body : out;
    Shape inner = cur;
    for (Layer* c : l->children()) flatten(c, join_layer_path(path, c->name()), unit, inner, plan, dst);
    cur = residual ? l->output_shape(cur) : inner;
    if (residual) out.push_back(std::move(compound));
    return;
  }
  TpLayerPlan p;
  p.layer = l;
  p.unit = unit;
  p.name = path;
  p.type = l->type();
  p.out_shape = l->output_shape(cur);
  p.local_out_shape = p.out_shape;
  cur = p.out_shape;
  Item it;
  it.plan_index = plan.layers.size();
  plan.layers.push_back(std::move(p));
  out.push_back(it);
}

// The weight layers of the whole model in order (for keep_first / keep_classifier).
void collect_weights(const std::vector<Item>& items, const TpPlan& plan, std::vector<size_t>& out) {
  for (const Item& it : items) {
    if (it.compound) collect_weights(it.body, plan, out);
    else if (is_weight(plan.layers[it.plan_index].layer)) out.push_back(it.plan_index);
  }
}

// Whether a layer can run on a channel shard whose split dim is `dim` of its per-sample
// input; updates dim for its output (flatten keeps the split block contiguous).
bool passes_local(const Layer* l, const Shape& in, int& dim, std::string& why) {
  if (dynamic_cast<const BatchNorm*>(l) || dynamic_cast<const Neuron*>(l) || dynamic_cast<const Pool2d*>(l)) {
    if (dim == 0) return true;
    why = "its channels are not the split dim";
    return false;
  }
  if (const auto* f = dynamic_cast<const Flatten*>(l)) {
    if (f->start_dim() == 0) dim = 0;  // [C, H, W] -> [C·H·W]: rank r holds block r
    return dim == 0;
  }
  if (const auto* m = dynamic_cast<const Mean*>(l)) {
    const int nd = static_cast<int>(in.size());
    const int d = m->dim() < 0 ? m->dim() + nd : m->dim();
    if (d == dim) {
      why = "it averages over the split channels";
      return false;
    }
    if (d < dim) --dim;
    return true;
  }
  why = "'" + l->type() + "' needs whole activations";
  return false;
}

struct Planner {
  TpPlan& plan;
  const TpOptions& opts;
  size_t first_weight = SIZE_MAX, last_weight = SIZE_MAX;

  TpLayerPlan& at(const Item& it) { return plan.layers[it.plan_index]; }

  static int64_t out_channels(const TpLayerPlan& p) {
    return p.layer->params().empty() ? 0 : p.layer->params()[0]->shape[0];
  }
  static int64_t in_channels(const TpLayerPlan& p) {
    return p.layer->params().empty() ? 0 : p.layer->params()[0]->shape[1];
  }

  void run(std::vector<Item>& items) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].compound) {
        run(items[i].body);
        continue;
      }
      TpLayerPlan& w = at(items[i]);
      if (!is_weight(w.layer) || w.role != TpRole::Replicated) continue;
      const size_t j = try_pair(items, i);
      if (j != SIZE_MAX) i = j;  // the rowwise partner is done; continue after it
      else gather_unpaired(w, items[i].plan_index);
    }
  }

  bool kept_whole(size_t plan_index) const {
    return (opts.keep_first && plan_index == first_weight) || (opts.keep_classifier && plan_index == last_weight);
  }

  // A weight layer without a rowwise partner: colwise with its output gathered, when allowed.
  void gather_unpaired(TpLayerPlan& w, size_t plan_index) {
    if (kept_whole(plan_index) || out_channels(w) % plan.tp != 0) return;
    w.role = TpRole::ColwiseGather;
    w.note += "; its output channels are gathered";
  }

  // Tries to make items[i] colwise with a rowwise partner; returns the partner's index.
  size_t try_pair(std::vector<Item>& items, size_t i) {
    TpLayerPlan& w = at(items[i]);
    const int tp = plan.tp;
    if (kept_whole(items[i].plan_index))
      return note(w, opts.keep_first && items[i].plan_index == first_weight ? "kept whole (--tp-keep-first)"
                                                                           : "kept whole (--tp-keep-classifier)");
    const int64_t cout = out_channels(w);
    if (cout % tp != 0)
      return note(w, std::to_string(cout) + " output channels do not divide by tp " + std::to_string(tp));
    int dim = 0;            // the split dim of the activations after the colwise layer
    size_t ssa = SIZE_MAX;  // spiking attention in the chain: split by heads (q, k, v blocks)
    for (size_t j = i + 1; j < items.size(); ++j) {
      if (items[j].compound) return note(w, "no rowwise partner before the residual block that follows");
      TpLayerPlan& n = at(items[j]);
      if (is_weight(n.layer)) {
        if (opts.keep_classifier && items[j].plan_index == last_weight)
          return note(w, "its partner '" + n.name + "' is kept whole (--tp-keep-classifier)");
        const int64_t nd = static_cast<int64_t>(at(items[j - 1]).out_shape.size());
        const bool matmul = n.type == "linear";
        if (matmul ? dim != nd - 1 : dim != 0)
          return note(w, "'" + n.name + "' cannot take the split channels rowwise");
        if (in_channels(n) % tp != 0)
          return note(w, "'" + n.name + "' has " + std::to_string(in_channels(n)) + " input features, not divisible by tp");
        shard(items, i, j, ssa);
        return j;
      }
      if (const auto* a = dynamic_cast<const SpikingAttention*>(n.layer)) {
        // q, k, v are the three blocks of the colwise layer's output: each is split by heads
        if (ssa != SIZE_MAX || dim != 0 || a->heads() % tp != 0 || cout % (3 * tp) != 0)
          return note(w, "'" + n.name + "' (" + std::to_string(a->heads()) + " heads) cannot be split by heads over tp " +
                             std::to_string(tp));
        ssa = j;
        continue;
      }
      const Shape& in = at(items[j - 1]).out_shape;
      std::string why;
      if (!passes_local(n.layer, in, dim, why)) return note(w, "no rowwise partner: '" + n.name + "' ends the split (" + why + ")");
    }
    return note(w, "no rowwise partner after it");
  }

  size_t note(TpLayerPlan& w, const std::string& why) {
    w.note = why;
    return SIZE_MAX;
  }

  // items[i] colwise, items[j] rowwise, the layers between local; with attention at `ssa`,
  // the colwise output and the local layers before it are split in 3 blocks (q, k, v).
  void shard(std::vector<Item>& items, size_t i, size_t j, size_t ssa) {
    const int tp = plan.tp;
    TpLayerPlan& col = at(items[i]);
    col.role = TpRole::Colwise;
    col.local_out_shape[0] /= tp;
    if (ssa != SIZE_MAX) col.segments = 3;
    int dim = 0;
    for (size_t k = i + 1; k < j; ++k) {  // the local layers: their output split along `dim`
      TpLayerPlan& l = at(items[k]);
      std::string why;
      if (k != ssa) passes_local(l.layer, at(items[k - 1]).out_shape, dim, why);
      l.role = TpRole::Local;
      l.local_out_shape[dim] /= tp;
      if (ssa != SIZE_MAX && k < ssa) l.segments = 3;
    }
    TpLayerPlan& row = at(items[j]);
    row.role = TpRole::Rowwise;
    row.forward_all_reduce = shape_numel(row.out_shape);  // the partial outputs, summed over tp
  }
};

// Whether a replicated leaf runs per sample (so on a sample shard): its statistics and
// parameters aside, nothing in it mixes samples.
bool sample_local(const Layer* l) {
  return dynamic_cast<const BatchNorm*>(l) || dynamic_cast<const Neuron*>(l) || dynamic_cast<const Pool2d*>(l) ||
         dynamic_cast<const Flatten*>(l) || dynamic_cast<const Mean*>(l);
}

// The sample-sharded regions of one layer sequence (compound bodies on their own): after each
// rowwise leaf, the replicated sample-local leaves that follow it, in the same unit unless
// opts.regions_cross_units.
void plan_regions(std::vector<Item>& items, TpPlan& plan, const TpOptions& opts) {
  for (size_t j = 0; j < items.size(); ++j) {
    if (items[j].compound) {
      plan_regions(items[j].body, plan, opts);
      continue;
    }
    const size_t start = items[j].plan_index;
    if (plan.layers[start].role != TpRole::Rowwise) continue;
    size_t k = j + 1;
    while (k < items.size() && !items[k].compound) {
      const TpLayerPlan& m = plan.layers[items[k].plan_index];
      if (m.role != TpRole::Replicated || is_weight(m.layer) || !sample_local(m.layer)) break;
      if (!opts.regions_cross_units && m.unit != plan.layers[start].unit) break;
      ++k;
    }
    if (k == j + 1) continue;  // nothing to shard after it
    TpRegionPlan r;
    r.start = start;
    r.last = items[k - 1].plan_index;
    const int index = static_cast<int>(plan.regions.size());
    for (size_t m = j; m < k; ++m) {
      TpLayerPlan& l = plan.layers[items[m].plan_index];
      l.sp_region = index;
      l.sp_role = m == j ? SpRole::Start : m + 1 == k ? SpRole::Last : SpRole::Member;
    }
    if (k < items.size() && !items[k].compound) {
      TpLayerPlan& next = plan.layers[items[k].plan_index];
      if (next.role == TpRole::Colwise && (opts.regions_cross_units || next.unit == plan.layers[r.last].unit)) {
        r.partial_grad_in = true;
        next.sp_role = SpRole::DeferColwise;
        next.sp_region = index;
      }
    }
    plan.regions.push_back(r);
  }
}

// A colwise layer's input gradient (the previous leaf's output shape, the model's input for
// the first) is summed over tp in backward; sharded regions trade the rowwise forward
// all-reduce (and a deferred colwise backward one) for reduce-scatters and all-gathers.
void fill_bytes(TpPlan& plan, const Shape& model_input) {
  Shape prev = model_input;
  for (TpLayerPlan& l : plan.layers) {
    const int64_t in = shape_numel(prev), out = shape_numel(l.out_shape);
    prev = l.out_shape;
    if (l.role == TpRole::ColwiseGather) {
      l.forward_channel_gather = out;
      l.backward_all_reduce = in;
    }
    if (l.role == TpRole::Colwise) {
      (l.sp_role == SpRole::DeferColwise ? l.sp_all_reduce_backward : l.backward_all_reduce) = in;
      if (l.sp_role == SpRole::DeferColwise) l.backward_all_gather = in;  // its saved samples, gathered for W
    }
    if (l.sp_role == SpRole::Start) {
      l.sp_all_reduce_forward = l.forward_all_reduce;
      l.forward_all_reduce = 0;
      l.forward_reduce_scatter = out;
      l.backward_all_gather = out;
    }
    if (l.sp_role == SpRole::Last) {
      l.forward_all_gather = out;
      if (plan.regions[static_cast<size_t>(l.sp_region)].partial_grad_in) l.backward_reduce_scatter = out;
    }
    if (sp_member(l.sp_role) && dynamic_cast<const BatchNorm*>(l.layer)) {
      const int64_t C = l.layer->params().empty() ? 0 : l.layer->params()[0]->shape[0];
      l.stats_forward_doubles = 2 * C + 1;
      l.stats_backward_doubles = 2 * C;
    }
  }
}

}  // namespace

TpPlan make_tp_plan(Model& model, const TpOptions& opts) {
  if (opts.tp < 1) SM_INPUT_ERROR("tp must be >= 1, got " << opts.tp);
  TpPlan plan;
  plan.tp = opts.tp;
  std::vector<Item> items;
  Shape cur = model.info.input_shape;
  for (size_t u = 0; u < model.units.size(); ++u) {
    Unit& unit = *model.units[u];
    for (Layer* c : unit.children())
      flatten(c, join_layer_path(unit.name(), c->name()), static_cast<int>(u), cur, plan, items);
  }
  if (opts.tp == 1) return plan;
  Planner p{plan, opts};
  std::vector<size_t> weights;
  collect_weights(items, plan, weights);
  if (!weights.empty()) {
    p.first_weight = weights.front();
    p.last_weight = weights.back();
  }
  p.run(items);
  if (opts.shard_regions) plan_regions(items, plan, opts);
  fill_bytes(plan, model.info.input_shape);
  return plan;
}

namespace {
// The dim a layer's k-th parameter is split along under the plan (-1: whole on every rank).
int split_dim_of(const TpLayerPlan& l, size_t k) {
  if (l.role == TpRole::Colwise || l.role == TpRole::ColwiseGather) return 0;  // weight [Cout, ...], bias [Cout]
  if (l.role == TpRole::Rowwise) return k == 0 ? 1 : -1;   // weight [Cout, Cin, ...]; bias whole
  if (l.role == TpRole::Local && dynamic_cast<const BatchNorm*>(l.layer)) return 0;  // γ, β [C]
  return -1;
}

void shard_dim(Param& p, int dim, int tp, int rank, int segments) {
  p.shard = ShardSpec{ShardSpec::Group::TP, dim, rank, tp, segments};
  p.local_shape = p.shape;
  p.local_shape[dim] /= tp;
}
}  // namespace

void apply_tp_plan(const TpPlan& plan, int tp_rank) {
  if (plan.tp == 1) return;
  SM_CHECK(tp_rank >= 0 && tp_rank < plan.tp, "tp rank " << tp_rank << " outside [0, " << plan.tp << ")");
  std::vector<std::shared_ptr<SpRegion>> regions;
  for (const TpRegionPlan& r : plan.regions) {
    auto region = std::make_shared<SpRegion>();
    region->partial_grad_in = r.partial_grad_in;
    regions.push_back(std::move(region));
  }
  for (const TpLayerPlan& l : plan.layers) {
    const std::vector<Param*> ps = l.layer->params();
    const bool member = sp_member(l.sp_role);
    for (size_t k = 0; k < ps.size(); ++k) {
      if (const int d = split_dim_of(l, k); d >= 0) shard_dim(*ps[k], d, plan.tp, tp_rank, l.segments);
      else if (l.role == TpRole::Local || member) ps[k]->grad_summed_over_tp = true;  // a channel or sample shard's
    }
    l.layer->set_sp_link(l.sp_region >= 0 ? SpLink{l.sp_role, regions[static_cast<size_t>(l.sp_region)]} : SpLink{});
    if (auto* wl = dynamic_cast<WeightLayer*>(l.layer)) wl->set_tp_gather_output(l.role == TpRole::ColwiseGather);
    if (l.role == TpRole::Local && dynamic_cast<const BatchNorm*>(l.layer)) {
      for (Buffer* b : l.layer->buffers()) {
        if (b->shape.size() != 1) continue;  // num_batches_tracked: a scalar, whole
        b->shard = ShardSpec{ShardSpec::Group::TP, 0, tp_rank, plan.tp, l.segments};
        b->local_shape = {b->shape[0] / plan.tp};
      }
    }
    if (l.role == TpRole::Local)
      if (auto* a = dynamic_cast<SpikingAttention*>(l.layer)) a->split_heads(plan.tp);
  }
}

std::string describe_tp_plan(const TpPlan& plan, int64_t batch, int64_t T, int64_t elem_bytes) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-4s  %-42s %-12s %-10s %-16s %-16s %-24s %12s\n", "unit", "layer", "type", "tp",
                "output", "local output", "local params", "sent B/step");
  os << line;
  for (const TpLayerPlan& l : plan.layers) {
    std::string params;
    const std::vector<Param*> ps = l.layer->params();
    for (size_t k = 0; k < ps.size(); ++k) {
      Shape local = ps[k]->shape;
      if (const int d = split_dim_of(l, k); d >= 0) local[d] /= plan.tp;
      params += (params.empty() ? "" : " ") + shape_str(local);
    }
    const double sent = plan.layer_traffic(l, batch, T, elem_bytes).sent_bytes;
    std::string role = tp_role_name(l.role);
    if (l.sp_role == SpRole::Start || l.sp_role == SpRole::DeferColwise) role += "/rs";  // reduce-scatters
    if (l.sp_role == SpRole::Member) role = "shard";
    if (l.sp_role == SpRole::Last) role = "shard/ag";
    std::snprintf(line, sizeof line, "%4d  %-42s %-12s %-10s %-16s %-16s %-24s %12.0f\n", l.unit, l.name.c_str(),
                  l.type.c_str(), role.c_str(), shape_str(l.out_shape).c_str(),
                  shape_str(l.local_out_shape).c_str(), params.c_str(), sent);
    os << line;
    if (!l.note.empty() && plan.tp > 1) os << "      (" << l.note << ")\n";
  }
  const TpPlan::Traffic t = plan.traffic(batch, T, elem_bytes);
  os << "tp " << plan.tp << ": " << plan.sharded_layers() << " of " << plan.layers.size() << " layers sharded, "
     << plan.regions.size() << " sample-sharded regions" << (plan.regions.empty() || batch % plan.tp == 0 ? "" : " (not used: the batch does not divide by tp)")
     << "; per step " << t.all_reduce_calls << " all-reduce calls of " << t.all_reduce_bytes << " bytes in all, "
     << t.reduce_scatter_calls << " reduce-scatter calls of " << t.reduce_scatter_bytes << " bytes, "
     << t.all_gather_calls << " all-gather calls of " << t.all_gather_bytes << " bytes; "
     << static_cast<int64_t>(t.sent_bytes)
     << " bytes sent by each rank (ring: all-reduce 2(tp-1)/tp of the payload, the others (tp-1)/tp)\n";
  return os.str();
}

}  // namespace sm
