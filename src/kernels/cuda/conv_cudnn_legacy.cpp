// conv_cudnn_legacy.cpp — the legacy cuDNN convolution API (cudnnGet*Algorithm_v7 /
// cudnnFind*): per-shape plans of descriptors and each direction's algorithm chosen once and
// cached (contracts and the policy in kernels/cuda/conv_cudnn.h). The fallback of the graph
// API (conv_cudnn_graph.cpp), and the only path for f64 and for SPIKEMESH_CUDNN_API=legacy.
#if defined(SPIKEMESH_HAVE_CUDA) && defined(SPIKEMESH_HAVE_CUDNN)
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "conv_cudnn_internal.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cuda/cudnn_check.h"

namespace sm {
namespace cuda {
namespace conv_detail {
namespace {

// ---- plans -----------------------------------------------------------------------------------

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

struct Direction {
  bool chosen = false;        // candidates computed
  std::vector<Choice> list;   // in preference order
  size_t index = 0;           // the one in use
  bool logged = false;        // the choice in use was recorded in the summary
};

struct Plan {
  std::string what;  // "f32 [8, 3, 32, 32] -> 16 k3 s1 p1" for messages
  DType dt = DType::F32;
  bool strict_f32 = false;       // f32 without TF32: FMA math only
  bool exact_f32 = false;        // f32 without FFT/Winograd (the exact policy)
  bool deterministic = true;
  bool tuned = false;            // candidates ranked by cudnnFind* timings
  size_t max_ws = 0;
  cudnnMathType_t base_math = CUDNN_DEFAULT_MATH;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Direction fwd, bwd_data, bwd_filter;
};

std::unique_ptr<Plan> make_plan(int device, const cpu::Conv2dGeometry& g, DType dt, const ConvOptions& o) {
  auto p = std::make_unique<Plan>();
  p->what = describe(g, dt, o.layout);
  p->dt = dt;
  p->strict_f32 = dt == DType::F32 && !o.allow_tf32;
  p->exact_f32 = dt == DType::F32 && !o.allow_imprecise;
  p->deterministic = o.deterministic;
  p->tuned = o.tuned;
  p->max_ws = resolved_workspace_limit(device, o.max_workspace_bytes);
  // f32: FMA only unless TF32 is allowed (DEFAULT permits TF32 on sm_80+); f64: default;
  // bf16/f16: tensor cores.
  p->base_math = dt == DType::F32 ? (o.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)
                 : dt == DType::F64 ? CUDNN_DEFAULT_MATH
                                    : CUDNN_TENSOR_OP_MATH;
  SM_CHECK(g.input_numel() < (int64_t{1} << 31) && g.output_numel() < (int64_t{1} << 31),
           "convolution " << p->what << ": tensors of 2^31 elements or more are not supported by cuDNN's "
                                      "convolution API; use a smaller batch or more ranks");
  const cudnnDataType_t t = cudnn_type(dt);
  // Accumulation: f64 for f64, f32 otherwise (PSEUDO_HALF / PSEUDO_BFLOAT16 configs).
  const cudnnDataType_t compute = dt == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  SM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  SM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  SM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  SM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  const cudnnTensorFormat_t format = o.layout == ConvLayout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  SM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, format, t, as_int(g.batch, "batch"),
                                            as_int(g.in_channels, "in_channels"), as_int(g.height, "height"),
                                            as_int(g.width, "width")));
  SM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, t, format, as_int(g.out_channels, "out_channels"),
                                            as_int(g.in_channels, "in_channels"), as_int(g.kernel, "kernel"),
                                            as_int(g.kernel, "kernel")));
  SM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, as_int(g.padding, "padding"), as_int(g.padding, "padding"),
                                                 as_int(g.stride, "stride"), as_int(g.stride, "stride"), 1, 1,
                                                 CUDNN_CROSS_CORRELATION, compute));
  SM_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->base_math));
  int n = 0, c = 0, h = 0, w = 0;
  SM_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n, &c, &h, &w));
  SM_CHECK(n == g.batch && c == g.out_channels && h == g.out_height() && w == g.out_width(),
           "cuDNN output dims [" << n << ", " << c << ", " << h << ", " << w << "] differ from the geometry's for "
                                 << p->what);
  SM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, format, t, n, c, h, w));
  return p;
}

Plan& plan_for(int device, const cpu::Conv2dGeometry& g, DType dt, const ConvOptions& o) {
  static std::mutex mu;
  static auto* plans = new std::map<ConvPlanKey, std::unique_ptr<Plan>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*plans)[conv_plan_key(device, g, dt, o)];
  if (!slot) slot = make_plan(device, g, dt, o);
  return *slot;
}

bool not_supported(cudnnStatus_t rc) { return CUDNN_STATUS_CATEGORY(rc) == CUDNN_STATUS_NOT_SUPPORTED; }

bool tensor_op_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Algorithms whose f32 results are not within ~1e-6 of a direct sum (transform-based).
bool imprecise_fwd(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool imprecise_bwd_data(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool imprecise_bwd_filter(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

const char* fwd_name(int a) {
  static const char* n[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                            "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 8 ? n[a] : "?";
}
const char* bwd_data_name(int a) {
  static const char* n[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 6 ? n[a] : "?";
}
const char* bwd_filter_name(int a) {
  static const char* n[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  return a >= 0 && a < 7 ? n[a] : "?";
}
const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conversion";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

// Keeps a heuristic result if it passes the plan's policy; fills c.
template <typename Perf, typename Algo>
bool acceptable(const Plan& p, const Perf& r, bool (*imprecise)(Algo), Choice& c) {
  if (r.status != CUDNN_STATUS_SUCCESS) return false;
  if (p.deterministic && r.determinism != CUDNN_DETERMINISTIC) return false;
  if (p.exact_f32 && imprecise(r.algo)) return false;
  cudnnMathType_t math = r.mathType;
  if (p.strict_f32) {
    if (tensor_op_math(math)) return false;
    math = CUDNN_FMA_MATH;
  }
  c.algo = static_cast<int>(r.algo);
  c.math = math;
  return true;
}

// Workspace of one candidate (queried with its math type set); false when unusable.
template <typename F>
bool workspace_of(Plan& p, Choice& c, F query) {
  if (cudnnSetConvolutionMathType(p.conv, c.math) != CUDNN_STATUS_SUCCESS) return false;
  size_t ws = 0;
  if (query(static_cast<int>(c.algo), &ws) != CUDNN_STATUS_SUCCESS) return false;
  if (ws > p.max_ws) return false;
  c.workspace = ws;
  return true;
}

void add_unique(std::vector<Choice>& list, const Choice& c) {
  for (const Choice& e : list)
    if (e.algo == c.algo && e.math == c.math) return;
  list.push_back(c);
}

// The math types of a zero-workspace fallback algorithm, in order: the plan's own, then (not
// for strict f32, where only FMA is allowed) the default and plain FMA ones.
std::vector<cudnnMathType_t> fallback_maths(const Plan& p) {
  if (p.strict_f32) return {CUDNN_FMA_MATH};
  return {p.base_math, CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH};
}

// The cuDNN entry points and policy of one direction. All three take their operands in the
// same order: inputs a and b, the convolution, then the output (forward: x, w -> y; backward
// data: w, dy -> dx; backward filter: x, dy -> dw).
template <typename Perf, typename Algo, typename DescA, typename DescB, typename DescOut>
struct Api {
  const char* name;  // the execute call, for messages and the summary
  const char* (*algo_name)(int);
  Direction Plan::*dir;
  DescA Plan::*a;
  DescB Plan::*b;
  DescOut Plan::*out;
  bool (*imprecise)(Algo);
  Algo fallback;  // deterministic, no workspace
  cudnnStatus_t (*max_count)(cudnnHandle_t, int*);
  cudnnStatus_t (*find)(cudnnHandle_t, DescA, DescB, cudnnConvolutionDescriptor_t, DescOut, int, int*, Perf*);
  cudnnStatus_t (*measure)(cudnnHandle_t, DescA, DescB, cudnnConvolutionDescriptor_t, DescOut, int, int*, Perf*);
  cudnnStatus_t (*workspace)(cudnnHandle_t, DescA, DescB, cudnnConvolutionDescriptor_t, DescOut, Algo, size_t*);
  cudnnStatus_t (*execute)(cudnnHandle_t, const void*, DescA, const void*, DescB, const void*,
                           cudnnConvolutionDescriptor_t, Algo, void*, size_t, const void*, DescOut, void*);
};
template <typename Perf, typename Algo, typename DescA, typename DescB, typename DescOut>
Api(const char*, const char* (*)(int), Direction Plan::*, DescA Plan::*, DescB Plan::*, DescOut Plan::*,
    bool (*)(Algo), Algo, cudnnStatus_t (*)(cudnnHandle_t, int*),
    cudnnStatus_t (*)(cudnnHandle_t, DescA, DescB, cudnnConvolutionDescriptor_t, DescOut, int, int*, Perf*),
    cudnnStatus_t (*)(cudnnHandle_t, DescA, DescB, cudnnConvolutionDescriptor_t, DescOut, int, int*, Perf*),
    cudnnStatus_t (*)(cudnnHandle_t, DescA, DescB, cudnnConvolutionDescriptor_t, DescOut, Algo, size_t*),
    cudnnStatus_t (*)(cudnnHandle_t, const void*, DescA, const void*, DescB, const void*, cudnnConvolutionDescriptor_t,
                      Algo, void*, size_t, const void*, DescOut, void*)) -> Api<Perf, Algo, DescA, DescB, DescOut>;

const Api kForward{"cudnnConvolutionForward", fwd_name, &Plan::fwd, &Plan::x, &Plan::w, &Plan::y, imprecise_fwd,
                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, cudnnGetConvolutionForwardAlgorithmMaxCount,
                   cudnnGetConvolutionForwardAlgorithm_v7, cudnnFindConvolutionForwardAlgorithm,
                   cudnnGetConvolutionForwardWorkspaceSize,
                   cudnnConvolutionForward};
const Api kBackwardData{"cudnnConvolutionBackwardData", bwd_data_name, &Plan::bwd_data, &Plan::w, &Plan::y, &Plan::x,
                        imprecise_bwd_data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                        cudnnGetConvolutionBackwardDataAlgorithmMaxCount, cudnnGetConvolutionBackwardDataAlgorithm_v7,
                        cudnnFindConvolutionBackwardDataAlgorithm, cudnnGetConvolutionBackwardDataWorkspaceSize, cudnnConvolutionBackwardData};
const Api kBackwardFilter{"cudnnConvolutionBackwardFilter", bwd_filter_name, &Plan::bwd_filter, &Plan::x, &Plan::y,
                          &Plan::w, imprecise_bwd_filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                          cudnnGetConvolutionBackwardFilterAlgorithmMaxCount,
                          cudnnGetConvolutionBackwardFilterAlgorithm_v7, cudnnFindConvolutionBackwardFilterAlgorithm,
                          cudnnGetConvolutionBackwardFilterWorkspaceSize, cudnnConvolutionBackwardFilter};

// Fills the direction's candidates in preference order: cuDNN's heuristic (or, tuned, timed) results that pass
// the plan's policy, then the fallback algorithm under each fallback math type; no duplicates.
template <typename Perf, typename Algo, typename DescA, typename DescB, typename DescOut>
void choose(int device, cudnnHandle_t h, Plan& p, const Api<Perf, Algo, DescA, DescB, DescOut>& api) {
  Direction& d = p.*api.dir;
  int max = 0;
  SM_CUDNN_CHECK(api.max_count(h, &max));
  std::vector<Perf> perf(static_cast<size_t>(std::max(max, 1)));
  int returned = 0;
  SM_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.base_math));
  // tuned: cudnnFind* runs every algorithm once (its own scratch buffers) and ranks by time;
  // never inside a CUDA-graph capture (it allocates and synchronises): the heuristic then
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SM_CUDA_CHECK(cudaStreamIsCapturing(stream_for(device), &capture));
  const bool measure = p.tuned && capture == cudaStreamCaptureStatusNone;
  SM_CUDNN_CHECK((measure ? api.measure : api.find)(h, p.*api.a, p.*api.b, p.conv, p.*api.out, max, &returned,
                                                    perf.data()));
  auto query = [&](int algo, size_t* ws) {
    return api.workspace(h, p.*api.a, p.*api.b, p.conv, p.*api.out, static_cast<Algo>(algo), ws);
  };
  for (int i = 0; i < returned; ++i) {
    Choice c;
    if (acceptable(p, perf[i], api.imprecise, c) && workspace_of(p, c, query)) add_unique(d.list, c);
  }
  for (cudnnMathType_t m : fallback_maths(p)) {
    Choice last{api.fallback, m, 0};
    if (workspace_of(p, last, query)) add_unique(d.list, last);
  }
  d.chosen = true;
}

// Runs `call(choice, workspace_ptr)` with the plan's current choice for a direction,
// dropping choices the library refuses. Logs the first success.
template <typename Call>
void run(int device, Plan& p, Direction& d, const char* dir, const char* (*algo_name)(int), Call call) {
  while (true) {
    if (d.index >= d.list.size())
      throw_library_error("cuDNN", dir, "no usable algorithm for convolution " + p.what, __FILE__, __LINE__);
    const Choice& c = d.list[d.index];
    SM_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, c.math));
    Tensor ws;  // [workspace] u8 from the caching allocator (stream-ordered reuse)
    if (c.workspace > 0) ws = Tensor::empty({static_cast<int64_t>(c.workspace)}, DType::U8, Device::cuda(device));
    const cudnnStatus_t rc = call(c, ws.defined() ? ws.raw() : nullptr);
    if (rc == CUDNN_STATUS_SUCCESS) {
      if (!d.logged) {  // the first success of this direction: record the choice once
        std::ostringstream os;
        os << dir << " " << p.what << ": algo " << c.algo << " (" << algo_name(c.algo) << "), " << math_name(c.math)
           << ", " << c.workspace << " B workspace";
        record_plan_line(os.str());
        d.logged = true;
      }
      return;
    }
    if (!not_supported(rc)) throw_cudnn_error(rc, dir, __FILE__, __LINE__);
    SM_DEBUG("cuDNN " << dir << " " << p.what << ": algo " << c.algo << " (" << algo_name(c.algo)
                      << ") not supported, trying the next one");
    ++d.index;
    d.logged = false;
  }
}

// One direction on `device`: out = 1·op(a, b) + beta·out, alpha and beta in the plan's
// scaling type (double for f64 data, float otherwise). Chooses the direction's candidates
// on first use.
template <typename Perf, typename Algo, typename DescA, typename DescB, typename DescOut>
void convolve(const Api<Perf, Algo, DescA, DescB, DescOut>& api, int device, const cpu::Conv2dGeometry& g, DType dt,
              const ConvOptions& opt, const void* a, const void* b, void* out, double beta) {
  DeviceGuard guard(device);
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, g, dt, opt);
  if (!(p.*api.dir).chosen) choose(device, h, p, api);
  const double one_d = 1.0, beta_d = beta;
  const float one_f = 1.0f, beta_f = static_cast<float>(beta);
  const void* alpha_v = dt == DType::F64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta_v = dt == DType::F64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  run(device, p, p.*api.dir, api.name, api.algo_name, [&](const Choice& c, void* ws) {
    return api.execute(h, alpha_v, p.*api.a, a, p.*api.b, b, p.conv, static_cast<Algo>(c.algo), ws, c.workspace,
                       beta_v, p.*api.out, out);
  });
}

}  // namespace

void legacy_convolve(ConvDirection dir, int device, const cpu::Conv2dGeometry& g, DType dt, const ConvOptions& opt,
                     const void* a, const void* b, void* out, double beta) {
  switch (dir) {
    case ConvDirection::Forward: return convolve(kForward, device, g, dt, opt, a, b, out, 0.0);
    case ConvDirection::BackwardData: return convolve(kBackwardData, device, g, dt, opt, a, b, out, 0.0);
    case ConvDirection::BackwardFilter: return convolve(kBackwardFilter, device, g, dt, opt, a, b, out, beta);
  }
}

}  // namespace conv_detail
}  // namespace cuda
}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA && SPIKEMESH_HAVE_CUDNN
