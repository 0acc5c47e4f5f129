// conv_cudnn.h (kernels/cuda) — 2-D convolution (and Conv1d as a 1×1 convolution over
// [batch, Cin, L, 1]) through cuDNN's convolution API. Include only from code compiled when
// SPIKEMESH_HAVE_CUDA is defined; the calls need SPIKEMESH_HAVE_CUDNN (otherwise they throw).
//
// Layout NCHW, contiguous: x [batch, Cin, H, W], w [Cout, Cin, K, K], y [batch, Cout, Ho, Wo]
// — exactly kernels/cpu/conv.h (cpu::Conv2dGeometry, cross-correlation like PyTorch); or, with
// ConvOptions::layout NHWC, channels-last x [batch, H, W, Cin], w [Cout, K, K, Cin],
// y [batch, Ho, Wo, Cout] (for measurement: the layers use NCHW). x, w, y,
// dy, dx, dw are all in `dt` (f32, f64, bf16, f16); cuDNN accumulates in f32 for bf16/f16
// (its PSEUDO_*_CONFIG) and in f64 for f64.
//
// Two paths, chosen per call by ConvOptions::api (kernels/conv_engine_policy.h; the process's
// default from SPIKEMESH_CUDNN_API = auto | graph | legacy, read once):
//   * the graph API (conv_cudnn_graph.h), first: each direction one cuDNN operation graph,
//     its engine configurations from heuristics mode A then FALLBACK, filtered by their
//     numerical notes (engine_rejection), the first that finalizes within the workspace limit
//     or, tuned, the fastest of them timed once per shape with CUDA events;
//   * the legacy API (conv_cudnn_legacy.cpp): cudnnGet*Algorithm_v7's ranked list (tuned:
//     cudnnFind*) under the same policy, plus a zero-workspace fallback algorithm.
// Auto takes the graph API when the loaded cuDNN is 9.0 or newer (cudnnGetVersion, checked at
// run time) and the data is not f64 (f64 always runs the legacy API); a shape whose graph
// cannot be built, finalized or run falls back to the legacy API after one SM_WARN line per
// shape and direction. Graph makes that an error; Legacy never tries the graph API.
//
// Policy (kernels/conv_policy.h, default_conv_options()): deterministic (exact,
// deterministic) admits only bitwise reproducible engines; f32 runs FMA math (no TF32 tensor
// cores) unless the conv fp32 precision is tf32; f32 excludes FFT/Winograd transforms unless
// allow_imprecise (deterministic, fast): the exact policy's results are within ~1e-6 relative
// of a direct sum, like the CPU's. Tuned ranks by measured time instead of the heuristic,
// never inside a CUDA-graph capture (the heuristic order then).
// Workspace: at most ConvOptions::max_workspace_bytes, or when that is 0 (the default)
// min(free device memory / 4, 4 GiB) taken when a shape's plan is made (workspace_limit).
//
// Plans: one per (device, dt, layout, geometry, options), created on first use and kept for
// the process; each direction's choice is made once, on its first call. A choice the library
// then refuses (CUDNN_STATUS_NOT_SUPPORTED*) is dropped and the next one used. The workspace
// is a u8 tensor from the caching allocator (returned after the call: stream-ordered, so
// steady-state steps make no cudaMalloc). All work is enqueued on the compute stream of
// `device`; the handle is bound to it. Not thread-safe for concurrent calls with the same plan
// (layers run on one thread).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/dtype.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/cpu/conv.h"

namespace sm {
namespace cuda {

// The process's options: the numerics of kernels/conv_policy.h (gpu_numerics()) and the API of
// SPIKEMESH_CUDNN_API (read once per process); workspace from free memory, layout NCHW.
ConvOptions default_conv_options();

// y = conv(x, w) (overwritten; no bias — see gemm_cublas.h add_channel_bias).
void conv2d_forward_cudnn(int device, const cpu::Conv2dGeometry& g, DType dt, const void* x, const void* w,
                          void* y, const ConvOptions& opt = {});
// dx = ∂L/∂x from dy (overwritten).
void conv2d_backward_data_cudnn(int device, const cpu::Conv2dGeometry& g, DType dt, const void* dy,
                                const void* w, void* dx, const ConvOptions& opt = {});
// dw = dw_beta·dw + ∂L/∂w (dw in dt; dw_beta 1 accumulates into a gradient of dtype dt).
void conv2d_backward_filter_cudnn(int device, const cpu::Conv2dGeometry& g, DType dt, const void* x,
                                  const void* dy, void* dw, double dw_beta, const ConvOptions& opt = {});

// One line per plan and direction chosen so far, for logs and tests. Legacy API:
// "cudnnConvolutionForward f32 [8, 3, 32, 32] -> 16 k3 s1 p1: algo 1 (IMPLICIT_PRECOMP_GEMM),
// fma, 0 B workspace"; graph API: "graph fwd f32 [8, 3, 32, 32] -> 16 k3 s1 p1: engine 12
// (knobs TILE_SIZE=3 STAGES=4; notes none), fma, 0 B workspace, heuristic" (fma, or
// tensor-core when the engine's notes say so; heuristic, or tuned with the measured ms).
std::vector<std::string> conv_plan_summary();

}  // namespace cuda
}  // namespace sm
