// dropout.h (kernels/cpu) — dropout with one keep-mask per (sample, feature) shared by all
// time steps. The mask is a bit array (u8, 8 per byte, LSB first): bit n·F + f is 1 when
// feature f of sample n is kept. Element f of sample n is drawn from the counter
// rng.uniform(f, step, global_sample) with global_sample = sample_offset + n, so the mask of
// a sample never depends on how the batch is split or which rank holds it.
#pragma once
#include <cstdint>

#include "spikemesh/core/rng.h"

namespace sm {
namespace cpu {

// Number of bytes of the mask of N samples × F features.
inline int64_t dropout_mask_bytes(int64_t N, int64_t F) { return (N * F + 7) / 8; }

// Draw the keep mask: kept when uniform ≥ p (probability 1 - p). bits: [dropout_mask_bytes].
void dropout_draw_mask(const CounterRng& rng, double p, uint32_t step, int64_t sample_offset,
                       int64_t N, int64_t F, uint8_t* bits);

// y[t, n, f] = x[t, n, f] · scale when bit n·F + f is set, else 0. x, y: [T, N, F].
// Used for the forward (x) and the backward (dy) alike.
template <typename T>
void dropout_apply(const T* x, const uint8_t* bits, int64_t steps, int64_t N, int64_t F, T scale,
                   T* y);

}  // namespace cpu
}  // namespace sm
