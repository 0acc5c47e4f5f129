// cost_model.h — predicts a layout's step time and peak memory per rank from measured pieces
// (docs/architecture.md §5b), so that `--distributed-mode auto` can rank every feasible layout
// without running it. Pure: no communication, no clock.
//
// The pieces (planner/calibration.h measures them and caches them in a JSON file):
//   MachineCosts  per collective and group size p, t(MiB) = alpha + beta·MiB, measured with every
//                 group of that size running at once (as a mesh's groups do); the optimizer's
//                 time per parameter element; the memory a rank may use.
//   ModelProfile  per tp size and memopt level (0, 1), the dry run of the tp-local model
//                 (parallel/pipeline/pp_costs.h) at two microbatch sizes, with every rank of the job
//                 running it at once (so the contention of shared cores is in the numbers): per
//                 unit forward and backward time, the bytes its forward keeps, the transient peak
//                 of its backward. Costs in between or beyond are linear in the samples. Also per
//                 unit: this rank's parameter bytes, the output elements per sample (pipeline
//                 messages) and its tp all-reduces (tp_plan.h's closed forms).
//
// One optimizer step of a layout (dp x tp x pp, reduction, schedule, memopt):
//   compute    per microbatch, Σ units forward + backward at n = samples per microbatch, plus the
//              units' tp all-reduces over tp (synchronous: calls·alpha + bytes·beta)
//   pp         the pipeline simulator (pp_simulator.h) on the best partition of those unit
//              costs, one send/recv of the boundary activation (bits when spikes) per message;
//              on an oversubscribed CPU (MachineCosts::oversubscription x > 1) the compute is then
//              scaled by max(1, o·x) / x, o the simulated occupancy (busy time over ranks x
//              makespan), and simulated again, twice: ranks that wait free their cores
//   dp         dp: bucketed all-reduce of the stage's gradients; ZeRO-1/2: a reduce-scatter and
//              an all-gather per unit; FSDP: two all-gathers and a reduce-scatter per unit and
//              microbatch — counted as exposed (on a CPU, MPI progresses a non-blocking
//              collective only when it is tested)
//   optimizer  the elements this rank steps x the calibrated time per element
// Peak memory per rank (the allocator's peak), the larger of two phases:
//   backward   parameters, gradients, optimizer state and dp's packed buckets as the strategy
//              holds them (strategy.h, data_parallel.h, zero.h, fsdp.h), plus the largest, over
//              the rank's units u in backward order, of what the reductions of the units after u
//              hold in flight until the end of backward (ZeRO-2/FSDP: their full gradients; the
//              collectives' measured scratch) and the activations at u's backward: the saved
//              bytes and kept inputs of u's stage up to u, plus, under pp, what the other live
//              (stage, microbatch) pairs keep (the rank's schedule replayed: a pair alive from
//              its F to its B), u's output and its gradient, u's measured backward transient;
//   optimizer  the state plus the optimizer's measured scratch for the elements it steps.
// Invariant: predictions are a function of the inputs alone, so every rank ranks alike.
// Its parts: unit_placement.h (where each unit runs), time_model.h (the step time),
// memory_model.h (the peak memory); the candidates and their enumeration: layout_candidates.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "spikemesh/comm/mesh.h"
#include "spikemesh/parallel/strategy.h"

namespace sm {

struct LayoutOptions;

// t = alpha + beta·MiB (ms); 0 for an empty payload.
struct LinkCost {
  double alpha_ms = 0, ms_per_mb = 0;
  double scratch_per_mb = 0;  // the allocator's bytes an operation holds while in flight, per payload byte
  double ms(double mb) const { return mb > 0 ? alpha_ms + ms_per_mb * mb : 0.0; }
};

// Payload convention (as `spikemesh commtest`): all_reduce the tensor, reduce_scatter its input,
// all_gather its output, send_recv one message.
enum class CollectiveKind { AllReduce = 0, ReduceScatter = 1, AllGather = 2, SendRecv = 3 };
const char* collective_kind_name(CollectiveKind k);
constexpr int kCollectiveKinds = 4;

struct MachineCosts {
  std::map<std::pair<int, int>, LinkCost> links;  // (CollectiveKind, group size) -> cost
  double optimizer_ns_per_element = 0;            // one optimizer step, per parameter element
  double optimizer_scratch = 0;                   // the allocator's bytes a step holds, per parameter byte
  double capacity_mb = 0;                         // memory one rank may use (0: unbounded)
  // CPU: the threads the node's ranks run over its cores (ranks per node x threads per rank /
  // cores; 1 on a GPU). Above 1 the dry runs, made with every rank busy, ran slower than a rank
  // computes while others wait (pipeline bubbles); predict_layout corrects the pipeline's
  // compute by the occupancy the simulator finds.
  double oversubscription = 1;
  // The cost for group size p (1: free): measured, else the nearest measured size of that kind.
  LinkCost link(CollectiveKind k, int p) const;
};

// One unit's dry run at one microbatch size.
struct UnitSample {
  double forward_ms = 0, backward_ms = 0;
  double saved_mb = 0;  // what its forward keeps for backward (the allocator's bytes)
  double work_mb = 0;   // the allocator's peak during its backward above its input, saved bytes,
                        // output and output gradient
  double input_kept_mb = 0;  // its input, kept alive by its forward for backward (not in saved_mb)
  double out_mb = 0;         // its output as this rank holds it (sample-sharded inside a tp region)
};

// The dry runs of the tp-local model at one tp size and one memopt level.
struct TpProfile {
  int tp = 1;
  int memopt_level = 0;
  std::vector<double> param_mb;      // per unit: this rank's parameter bytes (model dtype)
  std::vector<double> out_elements;  // per unit: whole output elements per sample (all T steps)
  std::vector<bool> out_binary;      // per unit: its output is spikes (a pipeline sends bits)
  std::vector<double> tp_calls;      // per unit: tp all-reduces per microbatch (forward + backward)
  std::vector<double> tp_elements;   // per unit: their elements per sample (all T steps)
  double input_elements = 0;         // the model input per sample (all T steps)
  int64_t n_lo = 1, n_hi = 1;        // the two microbatch sizes measured
  std::vector<UnitSample> lo, hi;    // per unit, at n_lo and n_hi
  UnitSample unit(size_t u, double n) const;  // linear in n through the two points, never < 0
  size_t units() const { return param_mb.size(); }
};

struct ModelProfile {
  std::string model;          // name and variables
  int T = 1;
  double elem_bytes = 4;      // activation bytes per element
  int optimizer_states = 2;   // state tensors per parameter (adam 2, sgd with momentum 1)
  std::vector<TpProfile> entries;
  const TpProfile* find(int tp, int memopt_level) const;  // nullptr when not measured
};

// One layout the planner may choose.
struct LayoutCandidate {
  MeshShape mesh;
  GradientReduction reduction = GradientReduction::AllReduce;
  std::string schedule;  // pp > 1: gpipe | 1f1b | interleaved | zero_bubble
  int virtual_stages = 1;
  int microbatches = 1;  // pp > 1; 1 otherwise
  int memopt_level = 0;
  std::string mode() const;   // none | dp | fsdp | tp | fsdp_tp | pp
  const char* sharding() const;  // --optimizer-sharding: none | zero | zero2
  std::string label() const;  // e.g. "fsdp_tp 2x2x1 memopt1", "pp 1x1x2 1f1b m4 zero"
  // `base` with this candidate's mode, sharding, pp flags and memopt level.
  LayoutOptions apply_to(const LayoutOptions& base) const;
};

struct LayoutPrediction {
  double step_ms = 0;
  double compute_ms = 0;     // forward + backward (+ recompute, + tp) of the busiest rank
  double bubble_ms = 0;      // pipeline: makespan - that rank's compute (waits and transfers)
  double tp_comm_ms = 0, dp_comm_ms = 0, optimizer_ms = 0;
  double peak_mb = 0;        // the largest rank's
  double state_mb = 0;       // parameters, gradients, optimizer state on that rank
  double activation_mb = 0;  // its activations and transients
  double activation_mb_per_sample = 0;  // growth of peak_mb per sample of the replica batch
  std::vector<int> partition;           // pp: units per logical stage
};

// The prediction for `c` with `replica_batch` samples per dp replica per step. Input error
// when the profile lacks the candidate's tp size or memopt level.
LayoutPrediction predict_layout(const LayoutCandidate& c, const ModelProfile& profile, const MachineCosts& machine,
                                int64_t replica_batch);

// Every layout of `world` ranks for a global batch of `global_batch` samples and a model of
// `units` units: meshes dp x tp x pp (tp among `tp_sizes`: those whose tp plan splits a layer;
// dp must divide the batch), the dp family's reductions (dp, ZeRO-1, ZeRO-2, FSDP; ZeRO-1 only
// under pp), pp schedules (gpipe and 1f1b; interleaved with 2 virtual stages where the units and
// the batch allow) at their default microbatches, each at memopt 0 and 1.
std::vector<LayoutCandidate> enumerate_layouts(int world, int units, int64_t global_batch,
                                               const std::vector<int>& tp_sizes);

}  // namespace sm
