// stream_cuda.h — the CUDA side of core/device.h: each device's compute stream as a
// cudaStream_t, a scoped current-device guard, and small event helpers. Include only from
// code compiled when SPIKEMESH_HAVE_CUDA is defined.
//
// Invariants:
//  * one compute stream per device, created on first use and never destroyed; it is a
//    BLOCKING stream (it orders with the legacy default stream 0), so a stray synchronous
//    cudaMemcpy elsewhere cannot overtake spikemesh's work;
//  * when a device's stream is created, that device's default memory pool (used by
//    cudaMallocAsync in some kernels) is told to keep freed memory cached
//    (release threshold = max), so stream-ordered scratch allocations reach a steady state
//    without driver calls.
#pragma once
#ifndef SPIKEMESH_HAVE_CUDA
#error "core/stream_cuda.h is only for CUDA builds"
#endif
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "spikemesh/core/device.h"

namespace sm {
namespace cuda {

// Devices spikemesh supports per process (ordinals 0 .. kMaxDevices-1).
constexpr int kMaxDevices = 64;

// The object of device `ordinal` in `slots`, created by make() on first use (double-checked
// under `mu`, published with release/acquire ordering); make() runs at most once per
// ordinal unless it throws. Used for per-device objects that live for the whole process.
template <typename T, typename Make>
T per_device_once(std::array<std::atomic<T>, kMaxDevices>& slots, std::mutex& mu, int ordinal, Make make) {
  T v = slots[ordinal].load(std::memory_order_acquire);
  if (v) return v;
  std::lock_guard<std::mutex> lock(mu);
  v = slots[ordinal].load(std::memory_order_acquire);
  if (v) return v;
  v = make();
  slots[ordinal].store(v, std::memory_order_release);
  return v;
}

// The compute stream of CUDA device `ordinal` (created on first use; thread-safe).
cudaStream_t stream_for(int ordinal);
inline cudaStream_t stream_for(const Device& d) { return stream_for(d.ordinal); }
// The compute stream of `ordinal` if it was created already, else nullptr (creates nothing).
cudaStream_t stream_if_created(int ordinal);
inline cudaStream_t raw_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

// cudaSetDevice with the check macro.
void set_current_device(int ordinal);
int current_device();
// "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90"
std::string device_description(int ordinal);

// Makes `ordinal` the current device for this scope (restores the previous one).
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Makes `waiter` wait (on the device, not the host) for everything enqueued on `producer`
// so far. No-op when they are the same stream.
void stream_wait(cudaStream_t waiter, cudaStream_t producer);

}  // namespace cuda
}  // namespace sm
