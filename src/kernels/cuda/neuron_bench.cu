// neuron_bench.cu (kernels/cuda) — microbenchmark of the fused LIF kernels (see
// kernels/cuda/neuron_bench.h). Bytes counted are the ones the kernels must move:
//   forward:  read x, write spikes (+ packed bits T·M/8 bytes when requested);
//   backward: read grad_s and x (x twice when T > kNeuronChunk, plus the membrane
//             checkpoints written and read), write grad_x.
// Several input sets (together larger than the L2 cache) are rotated so repeated runs do
// not measure the cache; inputs are pseudo-random (never zeros).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "common.cuh"
#include "spikemesh/kernels/cuda/neuron.h"
#include "spikemesh/kernels/cuda/neuron_bench.h"
#include "spikemesh/kernels/neuron_variant.h"

namespace sm {
namespace cuda {
namespace {

// Uniform in [lo, hi) from a 32-bit integer hash of (element, salt).
template <typename T>
__global__ void fill_random_kernel(T* __restrict__ out, int64_t n, uint32_t salt, float lo, float hi) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) ^ salt;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
    out[i] = from_f32<T>(lo + (hi - lo) * u);
  }
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (bytes) SM_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
  ~DeviceBuffer() {
    if (p_) (void)cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  template <typename U> U* as() const { return static_cast<U*>(p_); }

 private:
  void* p_ = nullptr;
};

class Events {
 public:
  Events() {
    SM_CUDA_CHECK(cudaEventCreate(&start_));
    SM_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Events() {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  // Median milliseconds of `iters` timed calls of f(i) after `warmup` untimed ones.
  template <class F>
  double median_ms(int warmup, int iters, cudaStream_t s, F&& f) {
    for (int i = 0; i < warmup; ++i) f(i);
    SM_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<float> ms(static_cast<size_t>(std::max(1, iters)));
    for (size_t i = 0; i < ms.size(); ++i) {
      SM_CUDA_CHECK(cudaEventRecord(start_, s));
      f(static_cast<int>(i));
      SM_CUDA_CHECK(cudaEventRecord(stop_, s));
      SM_CUDA_CHECK(cudaEventSynchronize(stop_));
      SM_CUDA_CHECK(cudaEventElapsedTime(&ms[i], start_, stop_));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

template <typename T>
struct InputSet {
  DeviceBuffer x, spikes, grad_s, grad_x, bits;
  InputSet(int64_t tm, bool with_bits)
      : x(tm * sizeof(T)), spikes(tm * sizeof(T)), grad_s(tm * sizeof(T)), grad_x(tm * sizeof(T)),
        bits(with_bits ? spike_words(tm) * sizeof(uint32_t) : 0) {}
};

template <typename T>
LifBenchResult run(const LifBenchOptions& o, cudaStream_t stream) {
  const int64_t T_ = o.steps, M = o.neurons, tm = T_ * M;
  SM_CHECK(T_ >= 1 && M >= 1, "bench_lif_cuda: T and M must be >= 1");
  cpu::NeuronKernelConfig c;  // LIF tau = 2: r = 0.5, decay_input, hard reset to 0, sigmoid 4
  c.r = 0.5;
  const double elem = static_cast<double>(sizeof(T));
  const double set_bytes = 4.0 * static_cast<double>(tm) * elem;

  int dev = 0, l2 = 0;
  SM_CUDA_CHECK(cudaGetDevice(&dev));
  SM_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  cudaDeviceProp prop;
  SM_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  const int sets = static_cast<int>(std::min(8.0, std::max(2.0, std::ceil(4.0 * l2 / set_bytes))));

  std::vector<InputSet<T>> in;
  in.reserve(static_cast<size_t>(sets));
  for (int s = 0; s < sets; ++s) {
    in.emplace_back(tm, o.spike_bits);
    fill_random_kernel<T><<<detail::blocks_for(tm), kThreads, 0, stream>>>(in.back().x.template as<T>(), tm,
                                                                         2u * s + 1u, -0.5f, 3.0f);
    SM_CUDA_CHECK_LAUNCH();
    fill_random_kernel<T><<<detail::blocks_for(tm), kThreads, 0, stream>>>(
        in.back().grad_s.template as<T>(), tm, 2u * s + 2u, -1.0f, 1.0f);
    SM_CUDA_CHECK_LAUNCH();
  }
  DeviceBuffer grad_r(sizeof(double));
  Events ev;

  LifBenchResult r;
  r.steps = T_;
  r.neurons = M;
  r.dtype = sizeof(T) == 4 ? "f32" : "bf16";
  r.device = prop.name;
  r.forward_ms = ev.median_ms(o.warmup, o.iters, stream, [&](int i) {
    InputSet<T>& b = in[static_cast<size_t>(i % sets)];
    neuron_forward_cuda<T>(c, b.x.template as<T>(), T_, M, nullptr, b.spikes.template as<T>(),
                           o.spike_bits ? b.bits.template as<uint32_t>() : nullptr, nullptr, stream);
  });
  r.backward_ms = ev.median_ms(o.warmup, o.iters, stream, [&](int i) {
    InputSet<T>& b = in[static_cast<size_t>(i % sets)];
    neuron_backward_cuda<T>(c, b.grad_s.template as<T>(), b.x.template as<T>(), nullptr, nullptr, T_, M,
                            b.grad_x.template as<T>(), o.plif ? grad_r.as<double>() : nullptr, stream);
  });

  const int64_t chunks = (T_ + kNeuronChunk - 1) / kNeuronChunk;
  r.forward_bytes = 2.0 * tm * elem + (o.spike_bits ? tm / 8.0 : 0.0);
  r.backward_bytes = (chunks > 1 ? 4.0 : 3.0) * tm * elem + (chunks > 1 ? 2.0 * (chunks - 1) * M * 4.0 : 0.0);
  r.forward_gbs = r.forward_bytes / (r.forward_ms * 1e-3) / 1e9;
  r.backward_gbs = r.backward_bytes / (r.backward_ms * 1e-3) / 1e9;

  // Device-to-device copy of a large buffer: the bandwidth ceiling (read + write bytes).
  const size_t copy_bytes = std::max<size_t>(size_t(256) << 20, static_cast<size_t>(tm * elem));
  DeviceBuffer src(copy_bytes), dst(copy_bytes);
  fill_random_kernel<float><<<detail::blocks_for(copy_bytes / 4), kThreads, 0, stream>>>(
      src.as<float>(), static_cast<int64_t>(copy_bytes / 4), 99u, 0.0f, 1.0f);
  SM_CUDA_CHECK_LAUNCH();
  const double copy_ms = ev.median_ms(o.warmup, o.iters, stream, [&](int) {
    SM_CUDA_CHECK(cudaMemcpyAsync(dst.as<void>(), src.as<void>(), copy_bytes, cudaMemcpyDeviceToDevice, stream));
  });
  r.memcpy_bytes = 2.0 * static_cast<double>(copy_bytes);
  const NeuronKernelOccupancy occ = neuron_kernel_occupancy_cuda(sizeof(T) == 2);
  r.threads_per_block = occ.threads_per_block;
  if (neuron_variant::forward_fast(T_, M, sizeof(T), o.spike_bits, {in[0].x.template as<T>()})) {
    r.forward_blocks_per_sm = occ.forward_blocks_per_sm;
    r.forward_registers = occ.forward_registers;
    r.forward_occupancy = occ.forward_fraction();
  }
  if (neuron_variant::backward_fast(T_, M, sizeof(T), {in[0].x.template as<T>()})) {
    r.backward_blocks_per_sm = occ.backward_blocks_per_sm;
    r.backward_registers = occ.backward_registers;
    r.backward_occupancy = occ.backward_fraction();
  }
  r.memcpy_gbs = r.memcpy_bytes / (copy_ms * 1e-3) / 1e9;
  SM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return r;
}

}  // namespace

std::string LifBenchResult::summary() const {
  std::ostringstream os;
  char line[256];
  os << "LIF kernel bench on " << device << ": T=" << steps << " M=" << neurons << " " << dtype << "\n";
  std::snprintf(line, sizeof line, "  forward   %9.3f ms  %10.1f MB  %8.1f GB/s  (%.0f%% of copy)\n",
                forward_ms, forward_bytes / 1e6, forward_gbs, 100.0 * forward_gbs / memcpy_gbs);
  os << line;
  std::snprintf(line, sizeof line, "  backward  %9.3f ms  %10.1f MB  %8.1f GB/s  (%.0f%% of copy)\n",
                backward_ms, backward_bytes / 1e6, backward_gbs, 100.0 * backward_gbs / memcpy_gbs);
  os << line;
  std::snprintf(line, sizeof line, "  D2D copy  %10.1f MB moved  %8.1f GB/s (read + write)\n",
                memcpy_bytes / 1e6, memcpy_gbs);
  os << line;
  const struct {
    const char* pass;
    int blocks, regs;
    double fraction;
  } occ[] = {{"forward", forward_blocks_per_sm, forward_registers, forward_occupancy},
             {"backward", backward_blocks_per_sm, backward_registers, backward_occupancy}};
  for (const auto& k : occ) {
    if (k.blocks < 0)
      std::snprintf(line, sizeof line, "  occupancy %-8s generic kernel (shape or alignment outside the vector path)\n",
                    k.pass);
    else
      std::snprintf(line, sizeof line,
                    "  occupancy %-8s %d blocks x %d threads per SM (%.0f%% of thread slots), %d registers/thread\n",
                    k.pass, k.blocks, threads_per_block, 100.0 * k.fraction, k.regs);
    os << line;
  }
  return os.str();
}

LifBenchResult bench_lif_cuda(const LifBenchOptions& o) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    SM_INPUT_ERROR("bench --kernel lif needs a CUDA GPU; none is visible to this process");
  }
  cudaStream_t stream = nullptr;
  SM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    LifBenchResult r = o.bf16 ? run<__nv_bfloat16>(o, stream) : run<float>(o, stream);
    SM_CUDA_CHECK(cudaStreamDestroy(stream));
    return r;
  } catch (...) {
    (void)cudaStreamDestroy(stream);
    throw;
  }
}

}  // namespace cuda
}  // namespace sm
