// conv_cudnn_backend.h — thin C++ over cuDNN's backend descriptors for the graph-API
// convolutions (conv_cudnn_graph.cpp): an owning descriptor, one direction's operation graph
// over x (uid 1), w (uid 2), y (uid 3), the engine configurations of a heuristics mode and
// what an engine declares (global index, numerical notes, knobs). A refusal by cuDNN throws
// PlanRefused (the caller falls back); nothing here touches the device.
// Private to src/kernels/cuda; compiled only with SPIKEMESH_HAVE_CUDA and SPIKEMESH_HAVE_CUDNN.
#pragma once
#if defined(SPIKEMESH_HAVE_CUDA) && defined(SPIKEMESH_HAVE_CUDNN)
#include <cudnn.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "spikemesh/core/dtype.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/cpu/conv.h"

namespace sm {
namespace cuda {
namespace conv_backend {

// cuDNN refused to build or finalize something: the shape (or one candidate) has no plan.
struct PlanRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws PlanRefused naming `what`, cuDNN's status and its last error text unless rc is success.
void must(cudnnStatus_t rc, const char* what);

// Owns one backend descriptor.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    must(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  explicit operator bool() const { return d_ != nullptr; }
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const void* values) {
    must(cudnnBackendSetAttribute(d_, name, type, n, values), "cudnnBackendSetAttribute");
    return *this;
  }
  Desc& set(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  }
  Desc& finalize(const char* what) {
    must(cudnnBackendFinalize(d_), what);
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;

// The descriptors of one direction's graph (all kept: plans refer to them).
struct Graph {
  Desc x, w, y, conv, op, graph;
};

// The finalized operation graph of one direction over tensors in dt (f32 accumulation),
// `layout`, `alignment` bytes; beta scales the existing output (the filter gradient only).
Graph build_graph(cudnnHandle_t h, ConvDirection dir, const cpu::Conv2dGeometry& g, DType dt, ConvLayout layout,
                  int64_t alignment, double beta);

struct Candidate {
  Desc cfg;  // the engine configuration from the heuristics
  int64_t engine = -1;
  unsigned notes = 0;  // EngineNote bits
  std::string knobs;   // "TILE_SIZE=3 STAGES=4"
  const char* mode = "A";
  Desc plan;  // the finalized execution plan (empty until made)
  int64_t workspace = 0;
  double ms = -1.0;  // measured (tuned)
};

// Engine index, notes and knobs of c.cfg; false when the engine needs a filter or bias reorder
// (int8x32 engines: our tensors are never reordered).
bool read_engine(Candidate& c);

// The configurations of heuristics `mode`, in its order.
std::vector<Desc> heuristic_configs(const Graph& gr, cudnnBackendHeurMode_t mode);

}  // namespace conv_backend
}  // namespace cuda
}  // namespace sm
#endif
