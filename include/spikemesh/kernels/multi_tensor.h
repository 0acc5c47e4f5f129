// multi_tensor.h — the host side of the multi-tensor optimizer launches
// (kernels/cuda/optim_multi.h): the chunk table that spreads the blocks of ONE launch over
// every tensor of a list, and the per-step scalars of SGD / Adam / AdamW that the update
// reads from device memory (so a launch captured in a CUDA graph stays valid while the
// learning rate and the step count change). Needs no CUDA header.
//
// Invariants: a chunk table lists the tensors in order and each tensor's chunks in ascending
// offset, `chunk` elements each (the last one of a tensor shorter); an empty tensor has no
// chunk. The scalars are computed exactly as optim/adam.cpp and sgd.cpp compute them per step
// (the per-tensor kernels' adam_step_args uses the same function), so the multi-tensor and
// the per-tensor updates see bitwise the same values.
#pragma once
#include <cstdint>
#include <vector>

namespace sm {

// Elements per block of a multi-tensor update or clip launch (a multiple of the block size).
constexpr int64_t kMultiTensorChunk = 8192;
// Elements per partial sum of the gradient norm (as grad_clip.cpp and the per-tensor kernels).
constexpr int64_t kGradNormBlock = 8192;

// One block's share of a multi-tensor launch: elements [begin, min(n, begin + chunk)) of
// tensor `tensor`. 16 bytes, the same layout on the host and the device.
struct TensorChunk {
  int32_t tensor = 0;
  int32_t reserved = 0;
  int64_t begin = 0;
};

// The chunks of tensors of `sizes` elements (each >= 0) in `chunk`-element pieces (chunk >= 1).
// Throws when the table would need more than INT32_MAX chunks or tensors (one block each).
std::vector<TensorChunk> build_chunk_table(const std::vector<int64_t>& sizes, int64_t chunk);

// [count + 1]: the index of each tensor's first chunk in `table`, then table.size()
// (tensor k owns chunks [starts[k], starts[k + 1])).
std::vector<int64_t> chunk_starts(const std::vector<TensorChunk>& table, int64_t count);

// The values of one optimizer step that change from step to step, as the update reads them
// from device memory (64 bytes, same layout on both sides).
struct OptimStepScalars {
  double lr = 0.0;               // the learning rate of this step (SGD)
  double step_size = 0.0;        // Adam: lr / (1 - β1^t)
  double bias_corr2_sqrt = 1.0;  // Adam: sqrt(1 - β2^t)
  double decay_factor = 1.0;     // AdamW: 1 - lr·wd for a decayed tensor (1 for Adam)
  double reserved[4] = {0.0, 0.0, 0.0, 0.0};
};

// SGD's scalars: the learning rate.
OptimStepScalars sgd_step_scalars(double lr);
// Adam (decoupled false) / AdamW (true) at step t (>= 1, counting this step), weight decay
// `weight_decay` for the tensors that are decayed.
OptimStepScalars adam_step_scalars(double lr, double beta1, double beta2, double weight_decay, bool decoupled,
                                   int64_t t);

}  // namespace sm
