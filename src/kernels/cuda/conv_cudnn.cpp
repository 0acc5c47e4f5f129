// conv_cudnn.cpp — the cuDNN convolution entry points: each call goes to the graph API
// (conv_cudnn_graph.cpp) or the legacy API (conv_cudnn_legacy.cpp) per ConvOptions::api, with
// the legacy API as the fallback of a shape the graph API cannot plan; plus what both share
// (handles, descriptions, the plan summary, the workspace limit). Contracts and the policy in
// kernels/cuda/conv_cudnn.h.
#if defined(SPIKEMESH_HAVE_CUDA)
#include "spikemesh/kernels/cuda/conv_cudnn.h"

#include <array>
#include <atomic>
#include <climits>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include "spikemesh/core/error.h"
#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/kernels/conv_policy.h"

#ifdef SPIKEMESH_HAVE_CUDNN
#include <cudnn.h>

#include "conv_cudnn_internal.h"
#include "spikemesh/kernels/cuda/conv_cudnn_graph.h"
#include "spikemesh/kernels/cuda/cudnn_check.h"
#endif

namespace sm {
namespace cuda {

#ifdef SPIKEMESH_HAVE_CUDNN
namespace conv_detail {

cudnnHandle_t handle_for(int device) {
  static std::array<std::atomic<cudnnHandle_t>, kMaxDevices> handles{};
  static std::mutex mu;
  SM_CHECK(device >= 0 && device < kMaxDevices, "CUDA device ordinal " << device);
  return per_device_once(handles, mu, device, [&] {
    DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    SM_CUDNN_CHECK(cudnnCreate(&h));  // never destroyed (process lifetime)
    SM_CUDNN_CHECK(cudnnSetStream(h, stream_for(device)));
    return h;
  });
}

std::string describe(const cpu::Conv2dGeometry& g, DType dt, ConvLayout layout) {
  std::ostringstream os;
  os << dtype_name(dt) << " [" << g.batch << ", " << g.in_channels << ", " << g.height << ", " << g.width << "] -> "
     << g.out_channels << " k" << g.kernel << " s" << g.stride << " p" << g.padding;
  if (layout == ConvLayout::NHWC) os << " nhwc";
  return os.str();
}

cudnnDataType_t cudnn_type(DType dt) {
  switch (dt) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    default: SM_CHECK(false, "cuDNN convolution on " << dtype_name(dt) << " (f32, f64, bf16, f16 only)");
  }
  return CUDNN_DATA_FLOAT;
}

int as_int(int64_t v, const char* what) {
  SM_CHECK(v >= 0 && v <= INT_MAX, "convolution " << what << " = " << v << " does not fit cuDNN's int");
  return static_cast<int>(v);
}

namespace {
std::vector<std::string>& summary_lines() {
  static auto* lines = new std::vector<std::string>();  // never destroyed
  return *lines;
}
std::mutex& summary_mu() {
  static std::mutex mu;
  return mu;
}
}  // namespace

void record_plan_line(const std::string& line) {
  {
    std::lock_guard<std::mutex> lock(summary_mu());
    summary_lines().push_back(line);
  }
  SM_DEBUG("cuDNN " << line);
}

size_t resolved_workspace_limit(int device, size_t requested) {
  if (requested > 0) return requested;
  DeviceGuard guard(device);
  size_t free_b = 0, total_b = 0;
  SM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return workspace_limit(requested, free_b);
}

}  // namespace conv_detail

namespace {

// Whether this call tries the graph API first: not for Legacy, not for f64, and (checked once)
// only with a cuDNN that has it; Graph with an unusable cuDNN or f64 data is an error.
bool graph_first(DType dt, const ConvOptions& opt) {
  if (opt.api == ConvApi::Legacy) return false;
  std::string why;
  const bool usable = cudnn_graph_api_usable(&why);
  if (opt.api == ConvApi::Graph) {
    SM_CHECK(usable, "SPIKEMESH_CUDNN_API=graph: " << why);
    SM_CHECK(dt != DType::F64, "SPIKEMESH_CUDNN_API=graph: f64 convolutions run the legacy cuDNN API only "
                               "(use auto or legacy)");
    return true;
  }
  if (!usable) {
    static std::once_flag once;
    std::call_once(once, [&] { SM_WARN("cuDNN: " << why << "; convolutions use the legacy API"); });
  }
  return usable && dt != DType::F64;
}

// One direction: graph API first where graph_first says so, the legacy API otherwise or when
// the graph API has no plan for the shape (one notice per shape and direction; an error under
// ConvApi::Graph). x, w, y as in conv_graph_run; the legacy API's operands a, b -> out.
void dispatch(ConvDirection dir, int device, const cpu::Conv2dGeometry& g, DType dt, const ConvOptions& opt,
              const void* x, const void* w, const void* y, double beta) {
  if (graph_first(dt, opt)) {
    const ConvGraphOutcome r =
        conv_graph_run(dir, device, g, dt, opt, const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y), beta);
    if (r.ran) return;
    const std::string what = std::string(conv_direction_name(dir)) + " " + conv_detail::describe(g, dt, opt.layout);
    SM_CHECK(opt.api != ConvApi::Graph,
             "cuDNN graph API: no plan for convolution " << what << " (" << r.why
                                                         << "); SPIKEMESH_CUDNN_API=graph forbids the legacy fallback");
    if (r.first_failure)
      SM_WARN("cuDNN graph API: no plan for convolution " << what << " (" << r.why << "); using the legacy API for it");
  }
  switch (dir) {
    case ConvDirection::Forward: return conv_detail::legacy_convolve(dir, device, g, dt, opt, x, w, const_cast<void*>(y), 0.0);
    case ConvDirection::BackwardData:
      return conv_detail::legacy_convolve(dir, device, g, dt, opt, w, y, const_cast<void*>(x), 0.0);
    case ConvDirection::BackwardFilter:
      return conv_detail::legacy_convolve(dir, device, g, dt, opt, x, y, const_cast<void*>(w), beta);
  }
}

}  // namespace

void conv2d_forward_cudnn(int device, const cpu::Conv2dGeometry& g, DType dt, const void* x, const void* w, void* y,
                          const ConvOptions& opt) {
  if (g.output_numel() == 0) return;
  DeviceGuard guard(device);
  dispatch(ConvDirection::Forward, device, g, dt, opt, x, w, y, 0.0);
}

void conv2d_backward_data_cudnn(int device, const cpu::Conv2dGeometry& g, DType dt, const void* dy, const void* w,
                                void* dx, const ConvOptions& opt) {
  if (g.input_numel() == 0) return;
  DeviceGuard guard(device);
  dispatch(ConvDirection::BackwardData, device, g, dt, opt, dx, w, dy, 0.0);
}

void conv2d_backward_filter_cudnn(int device, const cpu::Conv2dGeometry& g, DType dt, const void* x, const void* dy,
                                  void* dw, double dw_beta, const ConvOptions& opt) {
  if (g.weight_numel() == 0) return;
  DeviceGuard guard(device);
  dispatch(ConvDirection::BackwardFilter, device, g, dt, opt, x, dw, dy, dw_beta);
}

ConvOptions default_conv_options() {
  static const ConvApi api = conv_api_from_env();  // read once per process
  ConvOptions o = conv_options_of(gpu_numerics());  // set once by the command's front end
  o.api = api;
  return o;
}

std::vector<std::string> conv_plan_summary() {
  std::lock_guard<std::mutex> lock(conv_detail::summary_mu());
  return conv_detail::summary_lines();
}

#else  // no cuDNN headers

void conv2d_forward_cudnn(int, const cpu::Conv2dGeometry&, DType, const void*, const void*, void*,
                          const ConvOptions&) {
  SM_CHECK(false, "this build has no cuDNN (convolutions on CUDA need it)");
}
void conv2d_backward_data_cudnn(int, const cpu::Conv2dGeometry&, DType, const void*, const void*, void*,
                                const ConvOptions&) {
  SM_CHECK(false, "this build has no cuDNN (convolutions on CUDA need it)");
}
void conv2d_backward_filter_cudnn(int, const cpu::Conv2dGeometry&, DType, const void*, const void*, void*, double,
                                  const ConvOptions&) {
  SM_CHECK(false, "this build has no cuDNN (convolutions on CUDA need it)");
}
ConvOptions default_conv_options() { return {}; }
std::vector<std::string> conv_plan_summary() { return {}; }

#endif  // SPIKEMESH_HAVE_CUDNN

}  // namespace cuda
}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
