// tp_plan.h — the tensor-parallel plan of a model, derived from its spec (docs/architecture.md §7
// "TP"), never hand-written per model. Walking the layers in order (units inlined, residual bodies
// planned on their own), a weight layer (conv2d, conv1d, linear) becomes COLWISE (output
// channels split over tp) when a later weight layer can take the split channels ROWWISE
// (input channels split, partial outputs all-reduced) and every layer in between is
// channel-LOCAL: batch norm (exact: its statistics are per channel), neurons, pooling,
// flatten (the split channels stay one contiguous block of features), a mean over another
// dim, and Spikformer's spiking attention split BY HEADS (then the colwise layer's q, k, v
// output blocks are each split by heads: ShardSpec::segments 3, and the attention output is
// this rank's heads, a contiguous channel block for the rowwise projection). Everything
// else — dropout (its mask is keyed by the element's index), a residual or graph boundary,
// a head count not divisible by tp — ends the search, and the weight layer becomes
// COLWISE_GATHER (an unpaired layer: its output channels split, the output all-gathered over
// tp, so it leaves whole activations; only its parameters shrink), unless it is kept whole
// (--tp-keep-first/--tp-keep-classifier) or its output channels do not divide by tp: then it
// stays REPLICATED, with the reason in `note`. Replicated layers run whole on every tp rank
// (identical inputs, identical results).
//
// Applying the plan (before Model::finalize) gives every sharded Param and Buffer its
// ShardSpec (group TP, this rank's index) and local shape; init is then drawn from the global
// index (layers/init.h), so every layout starts from the same weights.
// Invariants: colwise and rowwise come in pairs with only LOCAL layers between them, so the
// activations entering and leaving every replicated layer, residual and unit are whole —
// except inside a sample-sharded REGION (layers/sequence_parallel.h): the sample-local
// layers right after a rowwise one (batch norm, neurons, pooling, flatten, mean; not past a
// residual or graph boundary, nor past a unit's end under pipelines) run on N/tp samples,
// their whole parameters' gradients summed over tp; the region's last layer all-gathers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/sequence_parallel.h"

namespace sm {

class Layer;
class Model;
struct Param;

enum class TpRole { Replicated, Colwise, Rowwise, Local, ColwiseGather };
const char* tp_role_name(TpRole r);

struct TpLayerPlan {
  Layer* layer = nullptr;
  int unit = 0;              // index in model.units
  std::string name, type;    // state-dict path and spec type
  TpRole role = TpRole::Replicated;
  Shape out_shape;           // per-sample output, whole
  Shape local_out_shape;     // per-sample output on this rank (split channels / tp)
  std::string note;          // why a weight layer stays replicated (empty otherwise)
  int segments = 1;          // 3: the split channels are q, k, v blocks, each split by heads
  // Per sample and time step, the elements all-reduced over tp: a rowwise layer's output in
  // forward, a colwise layer's input gradient in backward (0 elsewhere).
  int64_t forward_all_reduce = 0, backward_all_reduce = 0;
  // ColwiseGather: per sample and step, the whole output all-gathered (one call per microbatch).
  int64_t forward_channel_gather = 0;
  // Sample sharding (layers/sequence_parallel.h): the role, the region (index into
  // TpPlan::regions; -1 none), and per sample and step the whole payload of each collective:
  // a Start reduce-scatters its output forward and all-gathers its gradient backward; a Last
  // all-gathers its output and, when the next layer is colwise (partial_grad_in), reduce-
  // scatters the incoming gradient. When the samples per microbatch do not divide by tp these
  // fall back to the all-reduces above (sp_all_reduce_forward/backward).
  SpRole sp_role = SpRole::None;
  int sp_region = -1;
  int64_t forward_reduce_scatter = 0, forward_all_gather = 0, backward_reduce_scatter = 0, backward_all_gather = 0;
  int64_t sp_all_reduce_forward = 0, sp_all_reduce_backward = 0;
  // A batch norm in a region sums its statistics over tp: doubles per microbatch (2C + 1
  // forward, 2C backward), one all-reduce each.
  int64_t stats_forward_doubles = 0, stats_backward_doubles = 0;
};

struct TpRegionPlan {
  size_t start = 0, last = 0;    // indices into TpPlan::layers (the rowwise layer, the last member)
  bool partial_grad_in = false;  // the next layer is colwise and leaves its input gradient unreduced
};

struct TpOptions {
  int tp = 1;
  bool keep_first = false;       // the model's first weight layer stays replicated
  bool keep_classifier = false;  // the model's last weight layer stays replicated
  bool shard_regions = true;        // sample-shard the regions after rowwise layers
  bool regions_cross_units = true;  // false under pipelines: a stage boundary sends whole activations
};

struct TpPlan {
  int tp = 1;
  std::vector<TpLayerPlan> layers;  // every leaf layer in forward order
  std::vector<TpRegionPlan> regions;
  int64_t sharded_layers() const;
  // The collectives over tp of one training step of one microbatch of `samples` samples and
  // T steps: calls and payload bytes per kind (`elem_bytes` per activation element; batch
  // norm statistics are doubles; `grad_bytes` per gradient element: the whole parameters of
  // local layers and of sharded regions are all-reduced once per step, one call each).
  // Regions shard only when samples divide by tp.
  struct Traffic {
    int64_t all_reduce_calls = 0, all_reduce_bytes = 0;
    int64_t reduce_scatter_calls = 0, reduce_scatter_bytes = 0;
    int64_t all_gather_calls = 0, all_gather_bytes = 0;
    double sent_bytes = 0.0;  // per rank: ring all-reduce 2(tp-1)/tp, the others (tp-1)/tp of the payload
  };
  Traffic traffic(int64_t samples, int64_t T, int64_t elem_bytes, int64_t grad_bytes = 4) const;
  Traffic layer_traffic(const TpLayerPlan& l, int64_t samples, int64_t T, int64_t elem_bytes,
                        int64_t grad_bytes = 4) const;
};

// Pure: the model is built (spec loaded), not finalised. tp = 1 gives an all-replicated plan.
TpPlan make_tp_plan(Model& model, const TpOptions& opts);
// Sets ShardSpec (group TP, index tp_rank, count plan.tp) and local shapes of every sharded
// Param and Buffer, and marks the whole parameters of LOCAL layers (PLIF's w: each rank's
// gradient covers only its channels) and of region members (their samples only)
// Param::grad_summed_over_tp; links each region's layers to one shared SpRegion. Before
// Model::finalize; a no-op for tp = 1.
void apply_tp_plan(const TpPlan& plan, int tp_rank);
// The table `spikemesh plan` prints: per layer role, whole and local output shape, local
// parameter shapes and the bytes each rank sends per step for a batch of n samples, T steps,
// `elem_bytes` per element (ring all-reduce: 2(tp-1)/tp of the payload).
std::string describe_tp_plan(const TpPlan& plan, int64_t batch, int64_t T, int64_t elem_bytes);

}  // namespace sm
