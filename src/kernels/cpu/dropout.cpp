// dropout.cpp (kernels/cpu) — drawing the time-shared dropout mask as bits and applying it.
// Each byte of the mask is written by exactly one thread (parallel over bytes).
#include "spikemesh/kernels/cpu/dropout.h"

#include <algorithm>

namespace sm {
namespace cpu {

// Below this many elements a kernel runs on one thread (no fork/join cost).
constexpr int64_t kParallelMin = 1 << 15;

void dropout_draw_mask(const CounterRng& rng, double p, uint32_t step, int64_t sample_offset,
                       int64_t N, int64_t F, uint8_t* bits) {
  const int64_t total = N * F, bytes = dropout_mask_bytes(N, F);
#pragma omp parallel for schedule(static) if (total >= kParallelMin / 8)
  for (int64_t byte = 0; byte < bytes; ++byte) {
    uint8_t word = 0;
    const int64_t e0 = byte * 8, e1 = std::min(total, e0 + 8);
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t n = e / F, f = e % F;
      const uint32_t sample = static_cast<uint32_t>(sample_offset + n);
      if (rng.uniform(static_cast<uint64_t>(f), step, sample) >= p) word |= uint8_t(1u << (e - e0));
    }
    bits[byte] = word;
  }
}

template <typename T>
void dropout_apply(const T* x, const uint8_t* bits, int64_t steps, int64_t N, int64_t F, T scale,
                   T* y) {
  const int64_t per_step = N * F;
#pragma omp parallel for collapse(2) schedule(static) if (steps * per_step >= kParallelMin)
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t base = n * F;
      const T* xs = x + t * per_step + base;
      T* ys = y + t * per_step + base;
      for (int64_t f = 0; f < F; ++f) {
        const int64_t e = base + f;
        const bool keep = (bits[e >> 3] >> (e & 7)) & 1u;
        ys[f] = keep ? xs[f] * scale : T(0);
      }
    }
}

template void dropout_apply<float>(const float*, const uint8_t*, int64_t, int64_t, int64_t, float,
                                   float*);
template void dropout_apply<double>(const double*, const uint8_t*, int64_t, int64_t, int64_t,
                                    double, double*);

}  // namespace cpu
}  // namespace sm
