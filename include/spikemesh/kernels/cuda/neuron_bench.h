// neuron_bench.h (kernels/cuda) — microbenchmark of the fused LIF forward + backward kernels
// (`spikemesh bench --kernel lif`). Times each with CUDA events (warm-up, then the median of
// `iters` runs, inputs rotated among several buffer sets larger than L2) and reports achieved
// bandwidth over the bytes the kernels actually read and write, next to a large
// cudaMemcpyDeviceToDevice measured in the same program (read + write bytes), each kernel's
// bandwidth as a fraction of that copy's, and the kernels' measured occupancy.
// Include only when SPIKEMESH_HAVE_CUDA is defined. Needs a GPU (throws sm::Error otherwise).
//
// Floors for the defaults (T = 16, M = 2^22, f32, bits on): ~10 flops per element against
// 8.1 bytes forward (read x, write spike, 1/8 byte of bits) and 12 bytes backward (read x and
// grad_s, write grad_x): both kernels are bound by memory bandwidth. Forward moves 0.54 GB,
// backward 0.81 GB: at an H100's ~3 TB/s copy rate about 0.18 ms and 0.27 ms. Not yet
// measured (written on a machine without a GPU).
#pragma once
#include <cstdint>
#include <string>

namespace sm {
namespace cuda {

struct LifBenchOptions {
  int64_t steps = 16;         // T
  int64_t neurons = 1 << 22;  // M (e.g. N·C·H·W)
  int iters = 50;             // timed runs per kernel (median reported)
  int warmup = 5;
  bool bf16 = false;          // activations in bf16 instead of f32
  bool plif = false;          // backward also computes the rate gradient
  bool spike_bits = true;     // forward also writes packed spike bits
};

struct LifBenchResult {
  int64_t steps = 0, neurons = 0;
  const char* dtype = "f32";
  double forward_ms = 0, backward_ms = 0;          // median per call
  double forward_bytes = 0, backward_bytes = 0;    // bytes read + written per call
  double forward_gbs = 0, backward_gbs = 0;        // achieved GB/s (1e9 bytes/s)
  double memcpy_gbs = 0;                           // D2D copy, read + write bytes
  double memcpy_bytes = 0;                         // bytes moved per copy (2 × size)
  // Measured occupancy of the kernels timed (cudaOccupancyMaxActiveBlocksPerMultiprocessor
  // of the vectorised LIF variants; -1 when the shape ran the generic kernels).
  int forward_blocks_per_sm = -1, backward_blocks_per_sm = -1, threads_per_block = 0;
  int forward_registers = 0, backward_registers = 0;
  double forward_occupancy = 0, backward_occupancy = 0;  // resident threads / SM thread slots
  std::string device;                              // GPU name
  std::string summary() const;                     // a few human-readable lines
};

LifBenchResult bench_lif_cuda(const LifBenchOptions& o);

}  // namespace cuda
}  // namespace sm
