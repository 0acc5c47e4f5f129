// pp_costs.h — measured per-unit costs for the cost-balanced pipeline partition
// (docs/semantics.md §6): a dry-run forward + backward of every unit of a finalised model on the
// real shapes and in the run's activation dtype (bf16/f16 under mixed precision, where the layers
// run their bf16/f16 kernels and keep bf16/f16 tensors: the costs and saved bytes are those of the
// run) ([T, samples, ...unit input]; the units chained, so each sees the previous unit's real
// output — spikes where spikes flow — and its LOCAL shape under tensor parallelism), one
// warm-up and the best of two timed repetitions. Untimed, one forward pass gives the local
// per-sample output shape of every unit (what pipeline stages exchange). The model's state is left as it was: BN running statistics restored,
// gradients zeroed, neurons reset. Units whose layers reduce over tp (ctx.tp) communicate,
// so every rank of a tp group must call it together (collective over ctx.tp when set).
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"

namespace sm {

class Model;

struct UnitDryRun {
  std::vector<double> ms;        // per unit: forward + full backward of one microbatch (timed runs)
  std::vector<Shape> out_shape;  // per unit: its local per-sample output shape
  std::vector<double> saved_mb;  // per unit: bytes its forward keeps for backward (timed runs), MiB
  // Timed runs, per unit, of the repetition ms comes from: the forward and backward parts of ms;
  // the allocator's peak during the backward above what was live when it began (its input,
  // saved bytes, output and output gradient), MiB; whether the output is flagged binary (spikes).
  std::vector<double> forward_ms, backward_ms, work_mb;
  std::vector<bool> out_binary;
  // Timed runs, per unit: the bytes of its input its forward keeps alive by reference (a layer
  // saving its input), MiB; not in saved_mb, which counts new allocations only.
  std::vector<double> input_kept_mb;
  // Timed runs, per unit: its output's bytes as this rank holds them (a sample shard inside a tp
  // region), MiB.
  std::vector<double> out_mb;
};

// timed: costs and shapes; otherwise one forward + backward of one sample (shapes only, ms empty).
// activations: the dtype of the inputs and gradients (the model's dtype, or BF16/F16 for a
// CUDA model under --precision bf16/fp16).
UnitDryRun dry_run_units(Model& model, int64_t samples, Ctx ctx, bool timed, DType activations);

}  // namespace sm
