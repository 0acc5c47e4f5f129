// allocator_cuda.cpp — the stream-ordered caching device allocator, the pinned host
// allocator and allocation labels (contracts in core/allocator_cuda.h).
#include "spikemesh/core/allocator_cuda.h"

#include <array>
#include <atomic>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/spike_bits_cache.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/stream_cuda.h"
#endif

namespace sm {

// ---- labels ------------------------------------------------------------------------------

namespace {
thread_local CudaAllocLabel* g_innermost_label = nullptr;
}

CudaAllocLabel::CudaAllocLabel(const char* what, const std::string* name)
    : what_(what), name_(name), outer_(g_innermost_label) {
  g_innermost_label = this;
}

CudaAllocLabel::~CudaAllocLabel() { g_innermost_label = outer_; }

std::string CudaAllocLabel::current() {
  const CudaAllocLabel* l = g_innermost_label;
  if (!l) return "";
  std::string s = l->what_ ? l->what_ : "";
  if (l->name_ && !l->name_->empty()) s += " '" + *l->name_ + "'";
  return s;
}

#ifdef SPIKEMESH_HAVE_CUDA

namespace {

std::string mib(double bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << bytes / 1048576.0 << " MiB";
  return os.str();
}

}  // namespace

// ---- device allocator ----------------------------------------------------------------------

void* CudaCachingAllocator::allocate(size_t bytes) {
  const size_t sz = CpuCachingAllocator::round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* cached = capturing_ ? take_cached(graph_free_, sz) : nullptr;
  if (!cached) cached = take_cached(free_, sz);
  if (cached) {
    live_.insert(cached);
    if (capturing_) graph_owned_.insert(cached);
    return cached;
  }
  cuda::DeviceGuard guard(ordinal_);
  void* p = nullptr;
  cudaError_t rc = cudaMalloc(&p, sz);
  ++malloc_calls_;
  if (rc == cudaErrorMemoryAllocation && cached_ > 0) {
    (void)cudaGetLastError();
    free_cached();  // give every cached block back and retry once
    rc = cudaMalloc(&p, sz);
    ++malloc_calls_;
  }
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    const std::string what = CudaAllocLabel::current();
    std::ostringstream os;
    os << "out of GPU memory on cuda:" << ordinal_ << " (" << where_am_i() << "): allocating " << mib(bytes)
       << (what.empty() ? "" : " for " + what) << "; the device has " << mib(free_b) << " free of " << mib(total_b)
       << ", spikemesh holds " << mib(current_) << " in tensors (peak " << mib(peak_) << ")"
       << " — use a smaller --batch-size, fewer time steps, --precision bf16, or more ranks";
    throw Error(ErrorKind::Library, os.str());
  }
  SM_CUDA_CHECK(rc);
  reserved_ += sz;
  on_alloc(sz);
  live_.insert(p);
  if (capturing_) graph_owned_.insert(p);
  return p;
}

void CudaCachingAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  spike_bits_forget(p);  // before the lock: dropping the entry's bits frees their block through here
  const size_t sz = CpuCachingAllocator::round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(p);
  // Reusable at once by later work on the compute stream; a graph's block only by a graph.
  put_cached(graph_owned_.count(p) ? graph_free_ : free_, sz, p);
}

void CudaCachingAllocator::begin_graph_capture() {
  std::lock_guard<std::mutex> lock(mu_);
  SM_CHECK(!capturing_, "cuda:" << ordinal_ << ": a CUDA graph capture is already open");
  capturing_ = true;
  graph_owned_.insert(live_.begin(), live_.end());  // the graph may read or write any of them
}

void CudaCachingAllocator::end_graph_capture() {
  std::lock_guard<std::mutex> lock(mu_);
  capturing_ = false;
}

void CudaCachingAllocator::release_graph_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  capturing_ = false;
  for (auto& kv : graph_free_)
    for (void* b : kv.second) free_[kv.first].push_back(b);  // cached_ counts both lists alike
  graph_free_.clear();
  graph_owned_.clear();
}

void CudaCachingAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return;
  cuda::DeviceGuard guard(ordinal_);
  free_cached();
}

// Cached blocks may still be used by enqueued work: wait for it first (cudaFree would
// synchronise anyway).
void CudaCachingAllocator::free_cached() {
  SM_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& kv : free_)
    for (void* b : kv.second) {
      SM_CUDA_CHECK(cudaFree(b));
      ++free_calls_;
      reserved_ -= kv.first;
    }
  free_.clear();
  cached_ = 0;  // the graph's free blocks stay (a live graph replays into them)
  for (const auto& kv : graph_free_) cached_ += kv.first * kv.second.size();
}

CudaCachingAllocator& cuda_allocator(int ordinal) {
  SM_CHECK(ordinal >= 0 && ordinal < cuda::kMaxDevices, "CUDA device ordinal " << ordinal << " out of range");
  static std::array<std::atomic<CudaCachingAllocator*>, cuda::kMaxDevices> allocators{};
  static std::mutex mu;
  return *cuda::per_device_once(allocators, mu, ordinal, [&] {
    SM_CHECK(ordinal < cuda_device_count(), "cuda:" << ordinal << " is not a visible device ("
                                                     << cuda_device_count() << " visible)");
    return new CudaCachingAllocator(ordinal);  // never destroyed: tensors may outlive statics
  });
}

// ---- pinned host allocator -----------------------------------------------------------------

void* PinnedHostAllocator::allocate(size_t bytes) {
  const size_t sz = CpuCachingAllocator::round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find(sz);
  if (it != free_.end() && !it->second.empty()) {
    Block b = it->second.back();
    it->second.pop_back();
    // Copies that may still read the block were enqueued before it was freed.
    for (void* ev : b.events)
      if (ev) SM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ev)));
    cached_ -= sz;
    on_alloc(sz);
    return b.ptr;
  }
  void* p = nullptr;
  cudaError_t rc = cudaHostAlloc(&p, sz, cudaHostAllocPortable);
  ++alloc_calls_;
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    std::ostringstream os;
    os << "cannot allocate " << mib(bytes) << " of page-locked host memory (" << where_am_i()
       << "): " << cudaGetErrorString(rc) << "; " << mib(current_) << " pinned in use";
    throw Error(ErrorKind::Library, os.str());
  }
  events_of_[p];  // no events until first freed
  on_alloc(sz);
  return p;
}

void PinnedHostAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  const size_t sz = CpuCachingAllocator::round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  on_free(sz);
  std::vector<void*>& evs = events_of_[p];  // evs[d]: event of device d (created lazily)
  // Record on the compute stream of every device whose stream exists: an asynchronous copy
  // from or into this block can only have been enqueued there. Devices without a stream are
  // never touched (that would create a context on every GPU of the node). Called from
  // destructors, so nothing here throws: if an event cannot be recorded (e.g. the runtime is
  // shutting down) the block is not reused at all.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  bool ok = true;
  for (int d = 0; d < cuda::kMaxDevices && ok; ++d) {
    cudaStream_t s = cuda::stream_if_created(d);
    if (!s) continue;
    if (static_cast<int>(evs.size()) <= d) evs.resize(d + 1, nullptr);
    ok = cudaSetDevice(d) == cudaSuccess;  // an event records only on a stream of its own device
    if (ok && !evs[d]) {
      cudaEvent_t ev = nullptr;
      ok = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess;
      evs[d] = ok ? ev : nullptr;
    }
    ok = ok && cudaEventRecord(static_cast<cudaEvent_t>(evs[d]), s) == cudaSuccess;
  }
  if (previous >= 0) (void)cudaSetDevice(previous);
  if (!ok) {
    (void)cudaGetLastError();
    return;  // leaked on purpose: a copy may still read it
  }
  free_[sz].push_back(Block{p, evs});
  cached_ += sz;
}

void PinnedHostAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : free_)
    for (Block& b : kv.second) {
      for (void* ev : b.events) {
        if (!ev) continue;
        SM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ev)));
        SM_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(ev)));
      }
      events_of_.erase(b.ptr);
      SM_CUDA_CHECK(cudaFreeHost(b.ptr));
    }
  free_.clear();
  cached_ = 0;
}

PinnedHostAllocator& pinned_host_allocator() {
  static PinnedHostAllocator* a = new PinnedHostAllocator();  // never destroyed
  return *a;
}

#else  // !SPIKEMESH_HAVE_CUDA

void* CudaCachingAllocator::allocate(size_t) {
  SM_CHECK(false, "device memory in a build without CUDA");
  return nullptr;
}
void CudaCachingAllocator::deallocate(void*, size_t) {}
void CudaCachingAllocator::release_cache() {}
void CudaCachingAllocator::begin_graph_capture() {}
void CudaCachingAllocator::end_graph_capture() {}
void CudaCachingAllocator::release_graph_pool() {}
CudaCachingAllocator& cuda_allocator(int ordinal) {
  SM_CHECK(false, "cuda:" << ordinal << " has no allocator: this build has no CUDA support");
  static CudaCachingAllocator none(0);
  return none;
}
void* PinnedHostAllocator::allocate(size_t) {
  SM_CHECK(false, "pinned memory in a build without CUDA");
  return nullptr;
}
void PinnedHostAllocator::deallocate(void*, size_t) {}
void PinnedHostAllocator::release_cache() {}
PinnedHostAllocator& pinned_host_allocator() {
  static PinnedHostAllocator none;
  return none;
}

#endif  // SPIKEMESH_HAVE_CUDA

}  // namespace sm
