// conv_cudnn_graph.h (kernels/cuda) — convolutions through cuDNN's graph (backend) API: each
// direction one operation graph (CONVOLUTION_FORWARD / _BACKWARD_DATA / _BACKWARD_FILTER) over
// tensors x (uid 1), w (uid 2), y (uid 3) in `dt` with f32 accumulation. Include only from
// code compiled when SPIKEMESH_HAVE_CUDA is defined. conv_cudnn.h's entry points call this
// first (ConvOptions::api) and fall back to the legacy API when it returns ran = false.
//
// Plans: one per (ConvPlanKey, direction, pointer alignment, beta) — alpha/beta and the byte
// alignment of the pointers are part of a cuDNN graph, so a backward filter that accumulates
// (beta 1) and one that overwrites (beta 0) are two graphs, and a pointer less than 16-byte
// aligned (a view at an odd offset) gets a graph of its own. Made on first use, kept for the
// process. Candidates: the engine configurations of heuristics mode A, then mode FALLBACK,
// without duplicates, each rejected or kept by engine_rejection(its numerical notes)
// (kernels/conv_engine_policy.h) and by the behaviour notes (engines needing a filter
// reorder are skipped); each kept one must finalize an execution plan with a workspace within
// the limit. Heuristic policies take the first such plan; tuned policies finalize up to
// kTunedCandidates of them and keep the fastest, each run once to warm up and then timed
// kTunedRuns times with CUDA events (minimum) into a scratch output, never during a CUDA-graph
// capture (the heuristic order then, recorded as such). A plan cuDNN refuses at execution
// (CUDNN_STATUS_NOT_SUPPORTED*) is dropped and the next one used.
// f64 data and cuDNN older than 9.0 (cudnnGetVersion at run time) never come here.
#pragma once
#include <string>

#include "spikemesh/core/dtype.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/cpu/conv.h"

namespace sm {
namespace cuda {

constexpr int kTunedCandidates = 10;  // like PyTorch's torch.backends.cudnn.benchmark_limit
constexpr int kTunedRuns = 3;

// True when the loaded cuDNN has the graph API this path uses (9.0 or newer); otherwise false
// with `why` naming the version found. Checked once per process.
bool cudnn_graph_api_usable(std::string* why);

struct ConvGraphOutcome {
  bool ran = false;            // the convolution was enqueued
  bool first_failure = false;  // not ran, and this is the first call to find out for this plan
  std::string why;             // not ran: the reason (no engine admitted, finalize failed, ...)
};

// One direction through the graph API. x, w, y are the operands in the layout of opt.layout
// (forward writes y from x, w; backward data writes x (dx) from w, y (dy); backward filter
// writes w (dw) = beta·dw + ∂L/∂w from x, y (dy)); beta is ignored except for the filter.
// Returns ran = false when no plan can run this shape (the caller falls back or throws);
// throws on errors that are not a refusal to plan (a CUDA error, out of memory).
ConvGraphOutcome conv_graph_run(ConvDirection dir, int device, const cpu::Conv2dGeometry& g, DType dt,
                                const ConvOptions& opt, void* x, void* w, void* y, double beta);

// The plan in use for this direction (engine, knobs, notes, workspace, time when tuned),
// "" when none has run yet. For benchmarks and tests.
std::string conv_graph_choice(ConvDirection dir, int device, const cpu::Conv2dGeometry& g, DType dt,
                              const ConvOptions& opt, double beta);

}  // namespace cuda
}  // namespace sm
