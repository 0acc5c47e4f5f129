// stream_cuda.cpp — per-device compute streams, device selection helpers and the public
// stream functions of core/device.h for CUDA builds (see core/stream_cuda.h).
#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/stream_cuda.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/error_cuda.h"

namespace sm {
namespace cuda {
namespace {

std::array<std::atomic<cudaStream_t>, kMaxDevices> g_streams{};
std::mutex g_create_mu;

void check_ordinal(int ordinal) {
  SM_CHECK(ordinal >= 0 && ordinal < kMaxDevices, "CUDA device ordinal " << ordinal << " out of range");
}

}  // namespace

cudaStream_t stream_for(int ordinal) {
  check_ordinal(ordinal);
  return per_device_once(g_streams, g_create_mu, ordinal, [&] {
    DeviceGuard guard(ordinal);
    cudaStream_t s = nullptr;
    SM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
    // Keep memory freed by cudaFreeAsync cached in the default pool (kernels' scratch).
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess && pool) {
      uint64_t threshold = UINT64_MAX;
      SM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    } else {
      (void)cudaGetLastError();  // no memory-pool support: nothing to configure
    }
    return s;
  });
}

cudaStream_t stream_if_created(int ordinal) {
  check_ordinal(ordinal);
  return g_streams[ordinal].load(std::memory_order_acquire);
}

void set_current_device(int ordinal) {
  check_ordinal(ordinal);
  SM_CUDA_CHECK(cudaSetDevice(ordinal));
}

int current_device() {
  int d = 0;
  SM_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

std::string device_description(int ordinal) {
  cudaDeviceProp p{};
  SM_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  std::ostringstream os;
  os.precision(1);
  os << p.name << ", " << std::fixed << static_cast<double>(p.totalGlobalMem) / (1u << 30) << " GiB, sm_" << p.major
     << p.minor;
  return os.str();
}

DeviceGuard::DeviceGuard(int ordinal) {
  SM_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != ordinal) {
    SM_CUDA_CHECK(cudaSetDevice(ordinal));
  } else {
    previous_ = -1;  // nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);  // destructors do not throw
}

void stream_wait(cudaStream_t waiter, cudaStream_t producer) {
  if (waiter == producer) return;
  cudaEvent_t ev = nullptr;
  SM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  SM_CUDA_CHECK(cudaEventRecord(ev, producer));
  SM_CUDA_CHECK(cudaStreamWaitEvent(waiter, ev, 0));
  SM_CUDA_CHECK(cudaEventDestroy(ev));  // released once the wait is satisfied
}

}  // namespace cuda

Stream compute_stream(const Device& d) {
  if (d.is_cpu()) return Stream{};
  return Stream{static_cast<void*>(cuda::stream_for(d.ordinal)), d.ordinal};
}

void synchronize(const Stream& s) {
  if (!s.valid()) return;
  SM_CUDA_CHECK(cudaStreamSynchronize(cuda::raw_stream(s)));
}

void synchronize(const Device& d) {
  if (d.is_cpu()) return;
  SM_CUDA_CHECK(cudaStreamSynchronize(cuda::stream_for(d.ordinal)));
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
