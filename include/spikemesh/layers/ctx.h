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
  // Whether tp's replicated regions may run on sample shards (layers/sequence_parallel.h):
  // off while memopt may split segments into pieces (levels 2-4, a memory budget), whose
  // sample pieces of a shard cannot be gathered back in order.
  bool tp_shard_regions = true;
  bool tp_debug_comm = false;      // print each layer's tp collective once (--tp-debug-comm)
  // Set by a composite's backward loop for the duration of one child's backward_input when the
  // dy it passes is its own temporary (the previous child's result): a CPU elementwise backward
  // may then write dx over dy if no other handle shares its storage (layers/layer.h).
  bool dy_owned = false;
  // Set by the stage's backward loop, when its caller asked (a training step), for the layers
  // that read the model's input and are the first of their unit: nothing wants their input
  // gradient, so a weight layer skips its data gradient and returns an undefined tensor (a
  // composite passes it on to the child that reads its input; a Residual and a Graph do not).
  bool input_grad_unused = false;
  // memopt (layers/memopt_segment.h): `checkpointed` marks the forward of a checkpointed
  // segment (its saved state is dropped afterwards; batch norm keeps its batch statistics so
  // that the recompute repeats them exactly); `recompute` marks that segment's forward again in
  // backward: batch norm uses the kept statistics and leaves its running statistics alone,
  // neurons leave their firing statistics alone — every output is the same as the first time.
  bool checkpointed = false;
  bool recompute = false;
  // memopt splits of a checkpointed segment into pieces (layers/memopt_segment.h):
  //  time_grad_carry   neurons take the membrane gradient the later time chunk left and leave
  //                    theirs for the earlier one (the chunks of one backward, last first);
  //  bn_moments_for    that batch norm adds its input's moments to the segment's sums and stops
  //                    the forward (returns an undefined tensor);
  //  bn_grad_sums_for  that batch norm adds Σdy, Σdy·(x-μ) to the segment's sums and stops the
  //                    backward (returns an undefined tensor);
  //  bn_split          every other batch norm normalises with the kept statistics and, in
  //                    backward, uses the whole segment's sums instead of the piece's.
  bool time_grad_carry = false;
  bool accumulate_stats = false;  // neurons add this forward's firings to the previous piece's
  const void* bn_moments_for = nullptr;
  const void* bn_grad_sums_for = nullptr;
  bool bn_split = false;
  // > 1 while a sequence's children before its first neuron run on one time step of an input
  // whose T steps are identical (layers/time_invariant_prefix.h): batch norm counts its
  // statistics this many times, as if it had seen every step.
  int64_t time_repeat = 1;
  // Set by a training step around its forward: nothing will want the model input's gradient
  // (the backward sets input_grad_unused). The stage then sets merge_repeated_steps for its
  // model's first unit (also in evaluation, which has no backward): that unit may run its
  // children before the first neuron on one time step when the input repeats it (the
  // per-step gradients of the input would be lost, only their sum is made).
  bool model_input_grad_unused = false;
  bool merge_repeated_steps = false;
};

}  // namespace sm
