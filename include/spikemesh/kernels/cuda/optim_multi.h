// optim_multi.h (kernels/cuda) — multi-tensor optimizer launches: ONE launch updates every
// parameter tensor of a step (SGD with momentum / Nesterov, Adam, AdamW), one launch scales
// every gradient for clipping, three launches take the global gradient norm's sum of
// squares. The blocks are spread over the tensors by a chunk table (kernels/multi_tensor.h);
// the per-step values (lr, Adam's step size and bias correction, AdamW's decay factor) and
// the clip norm are read from device memory, so a launch captured in a CUDA graph stays
// valid across steps, learning-rate schedules and clip factors.
//
// Invariants: per element the arithmetic is that of the per-tensor kernels (optim.h; the same
// device functions), so results are bitwise theirs; the sum of squares adds in the per-tensor
// kernels' order (8192-element blocks, block partials in order per tensor, tensor totals in
// order). Every pointer is device memory; every call is async on `stream` and needs no host
// synchronisation. Include only when SPIKEMESH_HAVE_CUDA is defined.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "spikemesh/kernels/cuda/optim.h"
#include "spikemesh/kernels/multi_tensor.h"

namespace sm {
namespace cuda {

// One parameter tensor of a multi-tensor update (64 bytes). state1: SGD's momentum buffer
// (nullptr: no momentum) or Adam's exp_avg; state2: Adam's exp_avg_sq. p_bf16: a bf16 copy of
// the updated weight, or nullptr. decayed: weight decay applies to this tensor.
struct MultiTensorParam {
  float* p = nullptr;
  const float* g = nullptr;
  float* state1 = nullptr;
  float* state2 = nullptr;
  __nv_bfloat16* p_bf16 = nullptr;
  int64_t n = 0;
  int32_t decayed = 0;
  int32_t reserved = 0;
  int64_t reserved2 = 0;
};

// The hyper-parameters that stay fixed for the life of an optimizer (kernel arguments).
struct MultiSgdArgs {
  double weight_decay = 0.0, momentum = 0.0;
  bool nesterov = false;
};
struct MultiAdamArgs {
  double weight_decay = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool decoupled = false;  // AdamW
};

// Writes `v` to the device struct *dst in stream order (a one-thread kernel: the values
// travel as its argument, so the host buffer may change at once).
void store_step_scalars_cuda(OptimStepScalars* dst, const OptimStepScalars& v, cudaStream_t stream);

// Every tensor of `params` ([count]) updated by one launch over `chunks` ([num_chunks], built
// with kMultiTensorChunk), reading lr from *scalars. skip: when non-null and *skip != 0 at run
// time, nothing is written (a captured step whose result is to be discarded).
void sgd_multi_step_cuda(const MultiTensorParam* params, const TensorChunk* chunks, int64_t num_chunks,
                         const MultiSgdArgs& a, const OptimStepScalars* scalars, const int32_t* skip,
                         cudaStream_t stream);
// Adam / AdamW, reading step_size, bias_corr2_sqrt and decay_factor from *scalars.
void adam_multi_step_cuda(const MultiTensorParam* params, const TensorChunk* chunks, int64_t num_chunks,
                          const MultiAdamArgs& a, const OptimStepScalars* scalars, const int32_t* skip,
                          cudaStream_t stream);

// grad_sum_squares_cuda's result (bitwise) for `count` spans: `chunks` built with
// kGradNormBlock over the spans' sizes, `starts` = chunk_starts(chunks, count) ([count + 1],
// device), `scratch` num_chunks + count doubles. *sum_sq = the sum. Three launches.
void grad_sum_squares_multi_cuda(const GradSpan* spans, const TensorChunk* chunks, int64_t num_chunks,
                                 const int64_t* starts, int64_t count, double* scratch, double* sum_sq,
                                 cudaStream_t stream);

// clip_grads_cuda's result (bitwise) in one launch over `chunks` (kMultiTensorChunk):
// factor = max_norm / (sqrt(*sum_sq) + 1e-6), every grad scaled unless factor >= 1.
void clip_grads_multi_cuda(const GradSpan* spans, const TensorChunk* chunks, int64_t num_chunks,
                           const double* sum_sq, double max_norm, cudaStream_t stream);

// One device flag and the value it is expected to have (0/1; the flag counts as 1 when nonzero).
struct ExpectedFlag {
  const int32_t* flag = nullptr;
  int32_t expected = 0;
};
// *mismatch = 1 if any of `flags` ([count], host array, passed by value in batches) differs
// from its expected value, else 0. count 0: *mismatch = 0. ceil(count / 32) launches.
void flags_mismatch_cuda(const ExpectedFlag* flags, int64_t count, int32_t* mismatch, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
