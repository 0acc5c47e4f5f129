// spike_conv.h — convolution of a binary (spike) input on the CPU without multiplies: the
// forward pass and the weight gradient sum weight columns / output-gradient rows over the
// ACTIVE inputs only, so their cost scales with the firing rate instead of the dense FLOPs.
// The input gradient stays dense (conv.h); it does not see the spikes.
//
// Layouts and contracts are conv.h's (x [batch, Cin, H, W], w [Cout, Cin, K, K], y [batch,
// Cout, Ho, Wo]; forward overwrites y, backward_weights accumulates into dw and dbias). The
// input x must hold only 0 and 1 (a tensor flagged binary): any nonzero counts as a 1.
//
// How (docs/architecture.md §4b):
//  forward   the spikes as a bitmap [batch, H+2p, W+2p, ⌈Cin/64⌉ words] (zero border, so the
//            taps need no bounds checks) and the weight as [K·K·Cin, CoutP] (CoutP = Cout
//            rounded up to 16); a task is a tile of whole output rows (~256 pixels) of one
//            sample: per pixel the list of its active (tap, channel) inputs, then per block of
//            64 output channels register accumulators start at the bias and add the weight
//            row of every list entry (tap-major, channel ascending).
//  weights   per chunk of samples (in order; as many as keep the chunk's transposed dy
//            within 1 MB): dy transposed to [chunk·Ho·Wo, CoutP]; one thread owns the weight
//            rows of whole input channels: per channel, the active pixels of x[n, ci] in each
//            sample of the chunk, per tap the output pixels they reach (samples in order), then
//            per block of 64 output channels the dy rows of those pixels are added — per
//            element the order of one sample at a time, whatever the chunk size.
// Determinism: every output / weight-gradient element is summed by one thread in a fixed
// order, so the result is bitwise the same for any OpenMP thread count. It differs from the
// dense kernels only by float rounding: |sparse − exact| ≤ n·u·Σ|terms| with n the number
// of active terms and u = 2⁻²⁴ (tests/unit/test_spike_conv.cpp checks this bound against
// the naive double reference of tests/ref/).
#pragma once
#include <cstdint>

#include "spikemesh/kernels/cpu/conv.h"

namespace sm::cpu {

// Fraction of nonzero elements of x[0, n) (0 for n = 0). Exact count, any thread count.
double nonzero_fraction(const float* x, int64_t n);

// The weight gradient's chunk bound in bytes of transposed dy (0: the default, 1 MB). Tests
// set it to compare chunkings, which must give bitwise the same result.
void set_spike_conv_weight_chunk_bytes(int64_t bytes);

// The sums run in AVX-512 registers where kernels/cpu/isa.h's avx512_kernels() says so, else
// AVX2; both add in the same order, so the results are bitwise equal. Tests compare the two.

void spike_conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
void spike_conv2d_backward_weights(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                   float* dbias);

// The same two passes from the input's packed bits (core/bitpack.h: u8, element order of x,
// least significant bit first; ⌈numel/8⌉ bytes, the bits past numel zero), as a layer keeps a
// spike input for backward: no pass over the float input, bitwise the results above.
void spike_conv2d_forward_bits(const Conv2dGeometry& g, const uint8_t* x_bits, const float* w, const float* bias,
                               float* y);
void spike_conv2d_backward_weights_bits(const Conv2dGeometry& g, const uint8_t* x_bits, const float* dy, float* dw,
                                        float* dbias);
// The fraction of the n packed bits that are set (the firing rate the kernel choice reads).
double set_bit_fraction(const uint8_t* bits, int64_t n);

}  // namespace sm::cpu
