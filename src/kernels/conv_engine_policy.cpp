// conv_engine_policy.cpp — the CUDA-free parts of the cuDNN convolutions: API names, the
// engine filter by numerical notes, the workspace limit and the plan key
// (kernels/conv_engine_policy.h).
#include "spikemesh/kernels/conv_engine_policy.h"

#include <algorithm>
#include <cstdlib>

#include "spikemesh/core/error.h"

namespace sm {
namespace cuda {

ConvOptions conv_options_of(const GpuNumerics& n) {
  ConvOptions o;
  o.allow_tf32 = n.conv_fp32 == Fp32Precision::TF32;
  o.deterministic = n.conv.deterministic;
  o.allow_imprecise = n.conv.allow_imprecise;
  o.tuned = n.conv.tuned;
  return o;
}

ConvApi conv_api_from_name(const std::string& value, const std::string& source) {
  if (value.empty() || value == "auto") return ConvApi::Auto;
  if (value == "graph") return ConvApi::Graph;
  if (value == "legacy") return ConvApi::Legacy;
  SM_INPUT_ERROR(source << "=" << value
                        << ": unknown cuDNN API (valid: auto (the graph API, the legacy one where a shape has no "
                           "graph plan), graph, legacy)");
}

ConvApi conv_api_from_env() {
  const char* e = std::getenv("SPIKEMESH_CUDNN_API");
  return conv_api_from_name(e ? e : "");
}

const char* conv_api_name(ConvApi a) {
  switch (a) {
    case ConvApi::Auto: return "auto";
    case ConvApi::Graph: return "graph";
    case ConvApi::Legacy: return "legacy";
  }
  return "?";
}

const char* conv_layout_name(ConvLayout l) { return l == ConvLayout::NHWC ? "nhwc" : "nchw"; }

const char* conv_direction_name(ConvDirection d) {
  switch (d) {
    case ConvDirection::Forward: return "fwd";
    case ConvDirection::BackwardData: return "bwd-data";
    case ConvDirection::BackwardFilter: return "bwd-filter";
  }
  return "?";
}

std::string engine_rejection(unsigned notes, DType dt, const ConvOptions& o) {
  const bool f32 = dt == DType::F32;
  if (o.deterministic && (notes & kNoteNondeterministic)) return "nondeterministic (the policy is deterministic)";
  if (notes & kNoteDownConvertInputs) return "down-converts its inputs";
  if (notes & kNoteReducedPrecisionReduction) return "reduces in reduced precision";
  if (f32 && !o.allow_tf32 && (notes & kNoteTensorCore)) return "TF32 tensor cores (conv fp32 precision ieee)";
  if (f32 && !o.allow_imprecise && (notes & kNoteFft)) return "FFT transform (the exact policy)";
  if (f32 && !o.allow_imprecise && (notes & kNoteWinograd)) return "Winograd transform (the exact policy)";
  return "";
}

std::string engine_notes_text(unsigned notes) {
  static const std::pair<unsigned, const char*> names[] = {
      {kNoteTensorCore, "tensor-core"},       {kNoteDownConvertInputs, "down-convert-inputs"},
      {kNoteReducedPrecisionReduction, "reduced-precision-reduction"}, {kNoteFft, "fft"},
      {kNoteNondeterministic, "nondeterministic"}, {kNoteWinograd, "winograd"},
      {kNoteStrictNanProp, "strict-nan-prop"}};
  std::string s;
  for (const auto& [bit, name] : names)
    if (notes & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s.empty() ? "none" : s;
}

size_t workspace_limit(size_t requested, size_t free_bytes) {
  if (requested > 0) return requested;
  return std::min(free_bytes / kWorkspaceFreeDivisor, kWorkspaceCap);
}

ConvPlanKey conv_plan_key(int device, const cpu::Conv2dGeometry& g, DType dt, const ConvOptions& o) {
  return ConvPlanKey{device,       static_cast<int>(dt), static_cast<int>(o.layout),
                     g.batch,      g.in_channels,        g.height,
                     g.width,      g.out_channels,       g.kernel,
                     g.stride,     g.padding,            o.allow_tf32,
                     o.deterministic, o.allow_imprecise, o.tuned,
                     o.max_workspace_bytes, static_cast<int>(o.api)};
}

}  // namespace cuda
}  // namespace sm
