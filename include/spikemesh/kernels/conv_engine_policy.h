// conv_engine_policy.h — the host-side, CUDA-free parts of the cuDNN convolutions
// (kernels/cuda/conv_cudnn.h): their options, which cuDNN API runs them, which engine
// configurations of the graph API a policy admits, the workspace limit and the plan-cache key.
// Everything here is pure (no cuDNN, no device) so that CPU builds and CPU tests use it.
//
// Engine filter (engine_rejection), from an engine's numerical notes:
//   * NONDETERMINISTIC         rejected when ConvOptions::deterministic (exact, deterministic);
//   * DOWN_CONVERT_INPUTS      always rejected (inputs converted to a narrower type);
//   * REDUCED_PRECISION_REDUCTION  always rejected (sums in less than f32);
//   * TENSOR_CORE              rejected for f32 data unless allow_tf32 (f32 tensor cores = TF32);
//   * FFT, WINOGRAD (any tile) rejected for f32 data unless allow_imprecise (the exact policy:
//                              results within ~1e-6 relative of a direct sum, like the CPU's).
// bf16/f16 keep tensor cores and transforms (their own rounding dominates). The legacy API's
// algorithm filter follows the same rules (conv_cudnn_legacy.cpp).
//
// Workspace limit: ConvOptions::max_workspace_bytes, or when it is 0 (the default)
// min(free device memory / kWorkspaceFreeDivisor, kWorkspaceCap) taken when a shape's plan is
// made: a quarter of what is free leaves the rest to activations, and 4 GiB is more than any
// convolution engine of the models here asks for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>

#include "spikemesh/core/dtype.h"
#include "spikemesh/kernels/conv_policy.h"
#include "spikemesh/kernels/cpu/conv.h"

namespace sm {
namespace cuda {

// Which cuDNN API runs the convolutions: Auto (the graph API when the loaded cuDNN is 9.0 or
// newer and the data is not f64, the legacy API for a shape the graph API cannot plan, with a
// one-line notice), Graph (the graph API or an error), Legacy (cudnnGet*_v7 / cudnnFind*).
enum class ConvApi { Auto, Graph, Legacy };
// Memory layout of x, w and y (and dx, dw, dy): NCHW (w: [Cout, Cin, K, K]) or channels-last
// NHWC (w: [Cout, K, K, Cin]). The layers use NCHW; NHWC exists for measurement.
enum class ConvLayout { NCHW, NHWC };
enum class ConvDirection { Forward, BackwardData, BackwardFilter };

struct ConvOptions {
  bool allow_tf32 = false;       // f32 only: permit TF32 tensor cores (about 1e-3 relative)
  bool deterministic = true;     // bitwise reproducible engines only
  bool allow_imprecise = false;  // FFT / Winograd transforms allowed in f32
  bool tuned = false;            // rank by timing each candidate once per shape, not the heuristic
  size_t max_workspace_bytes = 0;  // 0: from free device memory (see above)
  ConvApi api = ConvApi::Auto;
  ConvLayout layout = ConvLayout::NCHW;
};

// The options of numerics `n` (its convolution policy and conv fp32 precision), api Auto,
// layout NCHW, the workspace from free memory.
ConvOptions conv_options_of(const GpuNumerics& n);

// "auto" | "graph" | "legacy" ("" = auto); InputError naming `source` and the valid values.
ConvApi conv_api_from_name(const std::string& value, const std::string& source = "SPIKEMESH_CUDNN_API");
// SPIKEMESH_CUDNN_API's value (auto when unset); InputError on a bad one.
ConvApi conv_api_from_env();
const char* conv_api_name(ConvApi a);
const char* conv_layout_name(ConvLayout l);
const char* conv_direction_name(ConvDirection d);  // "fwd", "bwd-data", "bwd-filter"

// Numerical notes of a graph-API engine as bits (cuDNN's cudnnBackendNumericalNote_t mapped).
enum EngineNote : unsigned {
  kNoteTensorCore = 1u << 0,
  kNoteDownConvertInputs = 1u << 1,
  kNoteReducedPrecisionReduction = 1u << 2,
  kNoteFft = 1u << 3,
  kNoteNondeterministic = 1u << 4,
  kNoteWinograd = 1u << 5,  // any Winograd tile (WINOGRAD, _TILE_4x4, _6x6, _13x13)
  kNoteStrictNanProp = 1u << 6,
};
// "" when the policy admits an engine with `notes` for data of type `dt`, otherwise the
// reason ("nondeterministic", "TF32 tensor cores (conv fp32 precision ieee)", ...).
std::string engine_rejection(unsigned notes, DType dt, const ConvOptions& o);
// "tensor-core,winograd" (comma-separated, "none" for no notes).
std::string engine_notes_text(unsigned notes);

constexpr size_t kWorkspaceCap = size_t{4} << 30;
constexpr size_t kWorkspaceFreeDivisor = 4;
// The workspace limit for `requested` (ConvOptions::max_workspace_bytes) and `free_bytes` of
// free device memory.
size_t workspace_limit(size_t requested, size_t free_bytes);

// A plan-cache key: device, dtype, layout, geometry and every field of ConvOptions.
using ConvPlanKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                               bool, bool, bool, bool, size_t, int>;
ConvPlanKey conv_plan_key(int device, const cpu::Conv2dGeometry& g, DType dt, const ConvOptions& o);

}  // namespace cuda
}  // namespace sm
