// conv_cudnn_internal.h — what the cuDNN convolution files share (conv_cudnn.cpp: entry points
// and dispatch; conv_cudnn_legacy.cpp: the legacy API; conv_cudnn_graph.cpp: the graph API):
// the per-device handle, shape descriptions, the plan summary and the workspace limit.
// Private to src/kernels/cuda; compiled only with SPIKEMESH_HAVE_CUDA and SPIKEMESH_HAVE_CUDNN.
#pragma once
#if defined(SPIKEMESH_HAVE_CUDA) && defined(SPIKEMESH_HAVE_CUDNN)
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "spikemesh/core/dtype.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/cpu/conv.h"

namespace sm {
namespace cuda {
namespace conv_detail {

// The process's cuDNN handle of `device`, bound to its compute stream (never destroyed).
cudnnHandle_t handle_for(int device);

// "f32 [8, 3, 32, 32] -> 16 k3 s1 p1" (NHWC: " nhwc" appended), for messages and the summary.
std::string describe(const cpu::Conv2dGeometry& g, DType dt, ConvLayout layout);

// cuDNN's data type of f32, f64, bf16, f16 (Error naming any other).
cudnnDataType_t cudnn_type(DType dt);

// v as an int for cuDNN's 32-bit descriptor fields (Error naming `what` when it does not fit).
int as_int(int64_t v, const char* what);

// Appends one line to conv_plan_summary() and logs it at debug level.
void record_plan_line(const std::string& line);

// workspace_limit(requested, free memory of `device` now) (kernels/conv_engine_policy.h).
size_t resolved_workspace_limit(int device, size_t requested);

// The legacy API (conv_cudnn_legacy.cpp): out = 1·op(a, b) + beta·out with cuDNN's operand
// order (forward: x, w -> y; backward data: w, dy -> dx; backward filter: x, dy -> dw).
void legacy_convolve(ConvDirection dir, int device, const cpu::Conv2dGeometry& g, DType dt, const ConvOptions& opt,
                     const void* a, const void* b, void* out, double beta);

}  // namespace conv_detail
}  // namespace cuda
}  // namespace sm
#endif
