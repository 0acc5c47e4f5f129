// dropout_kernels.h — the dropout kernels behind Dropout's one flow (dropout.cpp), per device.
// Both draw the keep mask of sample n, feature f from the same counter-based generator
// (key from (seed, "dropout/" + layer name); counter (f, step, sample_offset + n)), so the CPU
// and the GPU drop the same elements. Mask: u8 [ceil(N·F / 8)], bit n·F + f, LSB first.
#pragma once
#include <string>

#include "spikemesh/core/tensor.h"

namespace sm::dropout_kernels {

struct MaskSpec {
  uint64_t seed = 0;       // run seed (ctx.seed)
  std::string stream;      // "dropout/" + layer name
  double p = 0.0;          // drop probability
  uint32_t step = 0;       // low 32 bits of the optimizer step
  const void* step_on_device = nullptr;  // CUDA graphs: a device u32 holding `step` at run time
  const void* sample_offset_on_device = nullptr;  // CUDA graphs: a device i64 added to sample_offset
  int64_t sample_offset = 0, N = 0, F = 0;
};

// The keep mask of s on `dev` (CUDA builds: a CUDA device too).
Tensor draw_mask_cuda(const MaskSpec& s, Device dev);
// y = x ⊙ mask · scale over [T, N, F] (x may be dy in backward).
Tensor apply_mask_cuda(const Tensor& x, const Tensor& bits, int64_t N, int64_t F, double scale);

}  // namespace sm::dropout_kernels
