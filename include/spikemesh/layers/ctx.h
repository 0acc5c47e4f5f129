// ctx.h — the per-call context handed to every layer's forward/backward.
// `slot` selects the microbatch whose saved tensors a layer reads and writes: pipelines
// keep several microbatches in flight on one stage, each in its own slot.
#pragma once
#include <cstdint>

namespace sm {

class Collectives;  // layers/collectives.h

struct Ctx {
  int slot = 0;              // microbatch slot for saved tensors
  bool training = true;      // BN batch statistics, dropout active
  bool split_wgrad = false;  // backward_input computes dx only; backward_weight later
  uint64_t seed = 0;         // run seed (dropout masks)
  int64_t step = 0;          // optimizer step (dropout masks)
  int64_t sample_offset = 0; // global index of this microbatch's first sample
  bool smooth_spikes = false;  // test mode: neurons fire the surrogate's primitive (FD tests)
  Collectives* bn_sync = nullptr;  // synced batch norm over a group; nullptr = local
  Collectives* tp = nullptr;       // tensor-parallel reductions inside layers
  bool tp_debug_comm = false;      // print each layer's tp collective once (--tp-debug-comm)
  // memopt (layers/memopt_segment.h): `checkpointed` marks the forward of a checkpointed
  // segment (its saved state is dropped afterwards; batch norm keeps its batch statistics so
  // that the recompute repeats them exactly); `recompute` marks that segment's forward again in
  // backward: batch norm uses the kept statistics and leaves its running statistics alone,
  // neurons leave their firing statistics alone — every output is the same as the first time.
  bool checkpointed = false;
  bool recompute = false;
};

}  // namespace sm
