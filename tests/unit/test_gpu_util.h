// test_gpu_util.h — helpers for the *Gpu* tests of spikemesh's own CUDA kernels: device
// buffers that are poisoned before a kernel runs (so an unwritten element shows up as NaN),
// host conversions f32 <-> storage type, fresh random inputs and tolerance checks.
// Everything CUDA-specific is inside SPIKEMESH_HAVE_CUDA; tests skip without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/core/rng.h"

// Skips the current test when this process sees no GPU (or the build has no CUDA).
#define SM_SKIP_WITHOUT_GPU()                                         \
  do {                                                                \
    if (::sm::cuda_device_count() == 0) GTEST_SKIP() << "no GPU";     \
  } while (0)

#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "spikemesh/core/error_cuda.h"

namespace sm::gpu_test {

// f32 <-> storage type on the host.
inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float to_float(__half v) { return __half2float(v); }
template <typename T> T from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> inline __half from_float<__half>(float v) { return __float2half_rn(v); }

template <typename T> const char* type_name();
template <> inline const char* type_name<float>() { return "f32"; }
template <> inline const char* type_name<__nv_bfloat16>() { return "bf16"; }
template <> inline const char* type_name<__half>() { return "f16"; }

// Relative tolerance for results stored in T (f32: 1e-5, bf16/f16: 2e-2).
template <typename T> double storage_rtol() { return sizeof(T) == 4 ? 1e-5 : 2e-2; }

// A device array of n elements of U, freed on destruction. Poisoned (all bytes 0xFF: NaN
// for floats, -1 for integers) on creation unless told otherwise.
template <typename U>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, bool poison = true) : n_(n) {
    if (n_ > 0) {
      SM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(U)));
      if (poison) SM_CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(U)));
    }
  }
  explicit DeviceArray(const std::vector<U>& host) : DeviceArray(host.size(), false) { upload(host); }
  ~DeviceArray() {
    if (p_) (void)cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  U* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<U>& host) {
    EXPECT_EQ(host.size(), n_);
    if (n_ > 0) SM_CUDA_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(U), cudaMemcpyHostToDevice));
  }
  std::vector<U> download() const {
    SM_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<U> host(n_);
    if (n_ > 0) SM_CUDA_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(U), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  U* p_ = nullptr;
  size_t n_ = 0;
};

// Fresh pseudo-random floats in [lo, hi) (seeded per call site: fresh inputs per check).
inline std::vector<float> random_floats(size_t n, uint64_t seed, double lo, double hi) {
  CounterRng rng(seed, "test/gpu/random");
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(lo + (hi - lo) * rng.uniform(i));
  return v;
}

// The values rounded to T, and back as floats (what a kernel on T data actually sees).
template <typename T>
std::vector<T> to_storage(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_float<T>(v[i]);
  return out;
}
template <typename T>
std::vector<float> to_floats(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}

// |got - want| <= rtol·|want| + atol_scale·rtol·max|want| for every element (the absolute
// part covers values that cancel to near zero; 1 = the tolerance relative to the tensor's
// scale); NaN in got fails unless want is NaN there too.
// Reports the first offending index and the number of offenders.
template <typename G, typename W>
::testing::AssertionResult all_close(const std::vector<G>& got, const std::vector<W>& want,
                                     double rtol, const std::string& what,
                                     double atol_scale = 1.0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  double max_abs = 0.0;
  for (const W& w : want) max_abs = std::max(max_abs, std::fabs(static_cast<double>(w)));
  const double atol = atol_scale * rtol * max_abs;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool ok = std::isfinite(g) == std::isfinite(w) &&
                    (!std::isfinite(w) ? (std::isnan(g) == std::isnan(w)) : std::fabs(g - w) <= rtol * std::fabs(w) + atol);
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " elements differ; first at " << first << ": got "
                                       << static_cast<double>(got[first]) << ", want "
                                       << static_cast<double>(want[first]) << " (rtol " << rtol << ")";
}

}  // namespace sm::gpu_test
#endif  // SPIKEMESH_HAVE_CUDA
