// conv_cudnn.h (kernels/cuda) — 2-D convolution (and Conv1d as a 1×1 convolution over
// [batch, Cin, L, 1]) through cuDNN's convolution API. Include only from code compiled when
// SPIKEMESH_HAVE_CUDA is defined; the calls need SPIKEMESH_HAVE_CUDNN (otherwise they throw).
//
// Layout NCHW, contiguous: x [batch, Cin, H, W], w [Cout, Cin, K, K], y [batch, Cout, Ho, Wo]
// — exactly kernels/cpu/conv.h (cpu::Conv2dGeometry, cross-correlation like PyTorch). x, w, y,
// dy, dx, dw are all in `dt` (f32, f64, bf16, f16); cuDNN accumulates in f32 for bf16/f16
// (its PSEUDO_*_CONFIG) and in f64 for f64.
//
// Plans: one per (device, dt, geometry, options), created on first use and kept for the
// process. A plan owns its descriptors; each direction's algorithm is chosen ONCE, on the
// first call, from cudnnGet*Algorithm_v7's ranked list, filtered by:
//   * status success and workspace <= ConvOptions::max_workspace_bytes;
//   * deterministic (default): only algorithms cuDNN declares deterministic;
//   * f32 without allow_tf32 ("strict"): math type CUDNN_FMA_MATH (no TF32 tensor cores; note
//     CUDNN_DEFAULT_MATH would permit TF32 on sm_80+) and no FFT/Winograd algorithms, so that
//     results match the CPU to ~1e-6 relative.
//   * ConvOptions::allow_imprecise lifts the deterministic and the FFT/Winograd filters (TF32
//     stays off unless allow_tf32): cuDNN's own ranking, as PyTorch's default runs it, about
//     1e-5 relative in f32 and not bitwise reproducible run to run.
//   * ConvOptions::tuned ranks by cudnnFind* (each algorithm timed once per plan, on the first
//     call: PyTorch's cudnn.benchmark) instead of cudnnGet*_v7's heuristic; the filters stay.
// default_conv_options() is the process's policy (kernels/conv_policy.h: SPIKEMESH_CONV_ALGOS
// = exact | exact-tuned | fast | fast-tuned), read once.
// The list keeps the survivors in cuDNN's order plus a zero-workspace fallback; an algorithm
// that the library then refuses (CUDNN_STATUS_NOT_SUPPORTED*) is dropped and the next one
// used. The workspace is a u8 tensor from the caching allocator (returned after the call:
// stream-ordered, so steady-state steps make no cudaMalloc).
// All work is enqueued on the compute stream of `device`; the handle is bound to it.
// Not thread-safe for concurrent calls with the same plan (layers run on one thread).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/dtype.h"
#include "spikemesh/kernels/cpu/conv.h"

namespace sm {
namespace cuda {

struct ConvOptions {
  bool allow_tf32 = false;     // f32 only: permit TF32 tensor cores (about 1e-3 relative)
  bool deterministic = true;   // bitwise reproducible algorithms only
  bool allow_imprecise = false;  // fast policy: any algorithm cuDNN ranks (FFT, Winograd, atomics)
  bool tuned = false;            // rank by cudnnFind* timings, not the heuristic
  size_t max_workspace_bytes = size_t{512} << 20;
};

// The options SPIKEMESH_CONV_ALGOS selects (kernels/conv_policy.h); read once per process.
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

// One line per plan and direction chosen so far ("fwd f32 [8,3,32,32]->16 k3 s1 p1: algo 1
// (IMPLICIT_PRECOMP_GEMM), fma, 0 B workspace"), for logs and tests.
std::vector<std::string> conv_plan_summary();

}  // namespace cuda
}  // namespace sm
