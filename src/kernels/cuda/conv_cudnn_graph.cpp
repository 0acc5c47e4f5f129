// conv_cudnn_graph.cpp — convolutions through cuDNN 9's graph (backend) API: one operation
// graph per shape and direction, engine configurations from the heuristics filtered by their
// notes, execution plans finalized lazily (or all timed, tuned), kept per plan key
// (contracts in kernels/cuda/conv_cudnn_graph.h, the policy in kernels/conv_engine_policy.h).
// Building a graph or plan never throws past this file for a refusal by cuDNN: the shape is
// marked unplannable and the caller falls back to the legacy API.
#if defined(SPIKEMESH_HAVE_CUDA)
#include "spikemesh/kernels/cuda/conv_cudnn_graph.h"

#ifdef SPIKEMESH_HAVE_CUDNN
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "conv_cudnn_backend.h"
#include "conv_cudnn_internal.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cuda/cudnn_check.h"

namespace sm {
namespace cuda {
namespace {

using conv_backend::Candidate;
using conv_backend::Desc;
using conv_backend::Graph;
using conv_backend::PlanRefused;
using conv_backend::kUidW;
using conv_backend::kUidX;
using conv_backend::kUidY;
using conv_backend::must;
using conv_detail::describe;
using conv_detail::handle_for;

// ---- plans -------------------------------------------------------------------------------------

struct GraphPlan {
  std::string what;  // "graph fwd f32 [8, 3, 32, 32] -> 16 k3 s1 p1"
  bool built = false, failed = false, failure_reported = false;
  std::string why;  // failed: the reason
  std::string ranking = "heuristic";
  size_t max_ws = 0;
  Graph graph;
  std::vector<Candidate> list;  // admitted candidates in preference order
  size_t index = 0;             // the one in use
  bool logged = false;
  std::string choice;  // the summary text of the one in use
  std::array<void*, 4> pack_ptrs{};
  Desc pack;  // the variant pack of the last pointers (reused while they repeat)
};

using GraphKey = std::tuple<ConvPlanKey, int, int64_t, double>;  // plan key, direction, alignment, beta

std::mutex& plans_mu() {
  static std::mutex mu;
  return mu;
}
std::map<GraphKey, std::unique_ptr<GraphPlan>>& plans() {
  static auto* p = new std::map<GraphKey, std::unique_ptr<GraphPlan>>();  // never destroyed
  return *p;
}

// The largest power of two up to 16 dividing every pointer (cuDNN's BYTE_ALIGNMENT).
int64_t alignment_of(std::initializer_list<const void*> ptrs) {
  for (int64_t a = 16; a > 1; a /= 2) {
    bool ok = true;
    for (const void* p : ptrs) ok &= reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(a) == 0;
    if (ok) return a;
  }
  return 1;
}

// Fills p.list from heuristics modes A then FALLBACK (no duplicates), each configuration kept
// or rejected by the policy; PlanRefused when none is admitted.
void gather_candidates(GraphPlan& p, DType dt, const ConvOptions& opt) {
  std::map<std::string, int> rejected;  // reason -> count
  int offered = 0;
  std::string mode_errors;
  for (const auto& [mode, name] : {std::pair{CUDNN_HEUR_MODE_A, "A"}, std::pair{CUDNN_HEUR_MODE_FALLBACK, "FALLBACK"}}) {
    std::vector<Desc> cfgs;
    try {
      cfgs = conv_backend::heuristic_configs(p.graph, mode);
    } catch (const PlanRefused& e) {
      mode_errors += std::string(mode_errors.empty() ? "" : "; ") + "heuristics " + name + ": " + e.what();
      continue;
    }
    for (Desc& cfg : cfgs) {
      Candidate c;
      c.cfg = std::move(cfg);
      c.mode = name;
      ++offered;
      try {
        if (!conv_backend::read_engine(c)) {
          ++rejected["needs a filter reorder"];
          continue;
        }
      } catch (const PlanRefused& e) {
        ++rejected[e.what()];
        continue;
      }
      const bool dup = std::any_of(p.list.begin(), p.list.end(), [&](const Candidate& o) {
        return o.engine == c.engine && o.knobs == c.knobs;
      });
      if (dup) continue;
      const std::string reason = engine_rejection(c.notes, dt, opt);
      if (!reason.empty()) {
        SM_DEBUG("cuDNN " << p.what << ": engine " << c.engine << " (notes " << engine_notes_text(c.notes)
                          << ") rejected: " << reason);
        ++rejected[reason];
        continue;
      }
      p.list.push_back(std::move(c));
    }
  }
  if (!p.list.empty()) return;
  std::ostringstream os;
  os << "no engine configuration admitted by the policy (" << offered << " offered";
  for (const auto& [reason, count] : rejected) os << "; " << count << " " << reason;
  if (!mode_errors.empty()) os << "; " << mode_errors;
  os << ")";
  throw PlanRefused(os.str());
}

// Finalizes c's execution plan; false (with a debug line) when cuDNN refuses it or its
// workspace exceeds the limit.
bool make_plan(cudnnHandle_t h, const GraphPlan& p, Candidate& c) {
  if (c.plan) return true;
  try {
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, c.cfg)
        .finalize("execution plan");
    int64_t n = 0, ws = 0;
    must(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
         "execution plan workspace");
    if (ws < 0 || static_cast<size_t>(ws) > p.max_ws) {
      SM_DEBUG("cuDNN " << p.what << ": engine " << c.engine << " needs " << ws << " B of workspace (limit "
                        << p.max_ws << " B), skipped");
      return false;
    }
    c.workspace = ws;
    c.plan = std::move(plan);
    return true;
  } catch (const PlanRefused& e) {
    SM_DEBUG("cuDNN " << p.what << ": engine " << c.engine << " (knobs " << c.knobs << "): " << e.what());
    return false;
  }
}

cudnnStatus_t execute(cudnnHandle_t h, GraphPlan& p, const Candidate& c, void* x, void* w, void* y, void* ws) {
  const std::array<void*, 4> ptrs{x, w, y, ws};
  if (!p.pack || ptrs != p.pack_ptrs) {
    const int64_t uids[3] = {kUidX, kUidW, kUidY};
    void* data[3] = {x, w, y};
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids)
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, data)
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)
        .finalize("variant pack");
    p.pack = std::move(pack);
    p.pack_ptrs = ptrs;
  }
  return cudnnBackendExecute(h, c.plan.get(), p.pack.get());
}

Tensor workspace_tensor(int64_t bytes, int device) {
  return bytes > 0 ? Tensor::empty({bytes}, DType::U8, Device::cuda(device)) : Tensor();
}

bool capturing(int device) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SM_CUDA_CHECK(cudaStreamIsCapturing(stream_for(device), &capture));
  return capture != cudaStreamCaptureStatusNone;
}

// Tuned: finalizes up to kTunedCandidates plans, times each (one warm-up run, then the minimum
// of kTunedRuns) on the real inputs into a scratch output, and orders p.list by time (the
// untimed ones dropped). The output operand is `out` (x, w or y), replaced by the scratch.
void time_candidates(cudnnHandle_t h, int device, GraphPlan& p, DType dt, const cpu::Conv2dGeometry& g,
                     ConvDirection dir, void* x, void* w, void* y) {
  std::vector<Candidate*> timed;
  int64_t max_ws = 0;
  for (Candidate& c : p.list) {
    if (static_cast<int>(timed.size()) >= kTunedCandidates) break;
    if (!make_plan(h, p, c)) continue;
    timed.push_back(&c);
    max_ws = std::max(max_ws, c.workspace);
  }
  const int64_t out_numel = dir == ConvDirection::Forward        ? g.output_numel()
                            : dir == ConvDirection::BackwardData ? g.input_numel()
                                                                 : g.weight_numel();
  Tensor scratch = Tensor::empty({out_numel}, dt, Device::cuda(device));
  Tensor ws = workspace_tensor(max_ws, device);
  void* xs = dir == ConvDirection::BackwardData ? scratch.raw() : x;
  void* wsc = dir == ConvDirection::BackwardFilter ? scratch.raw() : w;
  void* ys = dir == ConvDirection::Forward ? scratch.raw() : y;
  cudaStream_t s = stream_for(device);
  cudaEvent_t start = nullptr, stop = nullptr;
  SM_CUDA_CHECK(cudaEventCreate(&start));
  SM_CUDA_CHECK(cudaEventCreate(&stop));
  for (Candidate* c : timed) {
    void* wsp = ws.defined() ? ws.raw() : nullptr;
    if (execute(h, p, *c, xs, wsc, ys, wsp) != CUDNN_STATUS_SUCCESS) continue;  // refused: stays untimed
    float best = std::numeric_limits<float>::infinity();
    for (int r = 0; r < kTunedRuns; ++r) {
      SM_CUDA_CHECK(cudaEventRecord(start, s));
      if (execute(h, p, *c, xs, wsc, ys, wsp) != CUDNN_STATUS_SUCCESS) break;
      SM_CUDA_CHECK(cudaEventRecord(stop, s));
      SM_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      SM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms);
    }
    if (best < std::numeric_limits<float>::infinity()) c->ms = best;
    SM_DEBUG("cuDNN " << p.what << ": engine " << c->engine << " (knobs " << c->knobs << "; notes "
                      << engine_notes_text(c->notes) << ") " << (c->ms >= 0 ? std::to_string(c->ms) + " ms" : "refused"));
  }
  SM_CUDA_CHECK(cudaEventDestroy(start));
  SM_CUDA_CHECK(cudaEventDestroy(stop));
  p.pack = Desc();  // it named the scratch buffers
  const size_t n_timed = static_cast<size_t>(
      std::count_if(p.list.begin(), p.list.end(), [](const Candidate& c) { return c.ms >= 0; }));
  p.list.erase(std::remove_if(p.list.begin(), p.list.end(), [](const Candidate& c) { return c.ms < 0; }),
               p.list.end());
  std::stable_sort(p.list.begin(), p.list.end(), [](const Candidate& a, const Candidate& b) { return a.ms < b.ms; });
  p.ranking = "tuned of " + std::to_string(n_timed);
  if (p.list.empty()) throw PlanRefused("no engine configuration could be timed (every plan refused)");
}

std::string choice_text(const GraphPlan& p, const Candidate& c) {
  std::ostringstream os;
  os << p.what << ": engine " << c.engine << " (knobs " << c.knobs << "; notes " << engine_notes_text(c.notes)
     << "), " << ((c.notes & kNoteTensorCore) ? "tensor-core" : "fma") << ", " << c.workspace << " B workspace, "
     << p.ranking;
  if (c.ms >= 0) os << " " << c.ms << " ms";
  os << " (heuristics mode " << c.mode << ")";
  return os.str();
}

// Builds the graph and the candidate list of p (tuned: timed) on the first call.
void build(cudnnHandle_t h, int device, GraphPlan& p, ConvDirection dir, const cpu::Conv2dGeometry& g, DType dt,
           const ConvOptions& opt, int64_t alignment, double beta, void* x, void* w, void* y) {
  p.built = true;
  try {
    p.max_ws = conv_detail::resolved_workspace_limit(device, opt.max_workspace_bytes);
    p.graph = conv_backend::build_graph(h, dir, g, dt, opt.layout, alignment, beta);
    gather_candidates(p, dt, opt);
    if (opt.tuned) {
      if (capturing(device)) p.ranking = "heuristic (first call inside a CUDA-graph capture)";
      else time_candidates(h, device, p, dt, g, dir, x, w, y);
    }
  } catch (const PlanRefused& e) {
    p.failed = true;
    p.why = e.what();
  }
}

}  // namespace

bool cudnn_graph_api_usable(std::string* why) {
  static const size_t version = cudnnGetVersion();
  if (version >= 90000) return true;
  if (why) {
    std::ostringstream os;
    os << "the loaded cuDNN is " << version / 1000 << "." << (version % 1000) / 100 << "." << version % 100
       << " (cudnnGetVersion " << version << "); the graph-API convolutions need 9.0 or newer";
    *why = os.str();
  }
  return false;
}

ConvGraphOutcome conv_graph_run(ConvDirection dir, int device, const cpu::Conv2dGeometry& g, DType dt,
                                const ConvOptions& opt, void* x, void* w, void* y, double beta) {
  SM_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16,
           "cuDNN graph API convolution on " << dtype_name(dt) << " (f32, bf16, f16 only)");
  const int64_t alignment = alignment_of({x, w, y});
  const double key_beta = dir == ConvDirection::BackwardFilter ? beta : 0.0;
  GraphPlan* pp = nullptr;
  {
    std::lock_guard<std::mutex> lock(plans_mu());
    auto& slot = plans()[GraphKey{conv_plan_key(device, g, dt, opt), static_cast<int>(dir), alignment, key_beta}];
    if (!slot) {
      slot = std::make_unique<GraphPlan>();
      slot->what = std::string("graph ") + conv_direction_name(dir) + " " + describe(g, dt, opt.layout);
    }
    pp = slot.get();
  }
  GraphPlan& p = *pp;
  cudnnHandle_t h = handle_for(device);
  if (!p.built) build(h, device, p, dir, g, dt, opt, alignment, key_beta, x, w, y);
  ConvGraphOutcome out;
  while (!p.failed) {
    if (p.index >= p.list.size()) {
      p.failed = true;
      p.why = "every admitted engine configuration was refused (finalize, workspace or execution)";
      break;
    }
    Candidate& c = p.list[p.index];
    if (!make_plan(h, p, c)) {
      ++p.index;
      continue;
    }
    Tensor ws = workspace_tensor(c.workspace, device);  // stream-ordered reuse by the caching allocator
    cudnnStatus_t rc;
    try {
      rc = execute(h, p, c, x, w, y, ws.defined() ? ws.raw() : nullptr);
    } catch (const PlanRefused& e) {
      throw_library_error("cuDNN", "cudnnBackendExecute", e.what(), __FILE__, __LINE__);
    }
    if (rc == CUDNN_STATUS_SUCCESS) {
      if (!p.logged) {
        p.choice = choice_text(p, c);
        conv_detail::record_plan_line(p.choice);
        p.logged = true;
      }
      out.ran = true;
      return out;
    }
    if (CUDNN_STATUS_CATEGORY(rc) != CUDNN_STATUS_NOT_SUPPORTED) throw_cudnn_error(rc, "cudnnBackendExecute", __FILE__, __LINE__);
    SM_DEBUG("cuDNN " << p.what << ": engine " << c.engine << " refused at execution, trying the next one");
    ++p.index;
    p.logged = false;
    p.pack = Desc();
  }
  out.why = p.why;
  out.first_failure = !p.failure_reported;
  p.failure_reported = true;
  return out;
}

std::string conv_graph_choice(ConvDirection dir, int device, const cpu::Conv2dGeometry& g, DType dt,
                              const ConvOptions& opt, double beta) {
  const ConvPlanKey key = conv_plan_key(device, g, dt, opt);
  const double key_beta = dir == ConvDirection::BackwardFilter ? beta : 0.0;
  std::lock_guard<std::mutex> lock(plans_mu());
  for (const auto& [k, plan] : plans())
    if (std::get<0>(k) == key && std::get<1>(k) == static_cast<int>(dir) && std::get<3>(k) == key_beta &&
        plan->logged)
      return plan->choice;
  return "";
}

}  // namespace cuda
}  // namespace sm

#else  // no cuDNN headers

namespace sm {
namespace cuda {
bool cudnn_graph_api_usable(std::string* why) {
  if (why) *why = "this build has no cuDNN";
  return false;
}
ConvGraphOutcome conv_graph_run(ConvDirection, int, const cpu::Conv2dGeometry&, DType, const ConvOptions&, void*,
                                void*, void*, double) {
  ConvGraphOutcome out;
  out.why = "this build has no cuDNN";
  return out;
}
std::string conv_graph_choice(ConvDirection, int, const cpu::Conv2dGeometry&, DType, const ConvOptions&, double) {
  return "";
}
}  // namespace cuda
}  // namespace sm

#endif  // SPIKEMESH_HAVE_CUDNN
#endif  // SPIKEMESH_HAVE_CUDA
