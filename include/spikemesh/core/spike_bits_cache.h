// spike_bits_cache.h — the packed bits a neuron wrote next to its spike output, found again
// by the next layer that keeps that output for backward (a convolution's or linear's input, a
// neuron's input), so no separate pack kernel runs over a tensor whose bits already exist.
//
// Entries are keyed by the device address of the spike tensor's data (its block: a fresh
// tensor starts its block) and also record its numel and dtype; a lookup matches only the
// same address, numel and dtype. The device allocator calls spike_bits_forget(block) when
// the block is freed, so an entry never outlives the tensor it describes (an address handed
// out again cannot find stale bits). Layers never write their inputs and a neuron's output
// is written only by the neuron, so the bits stay the tensor's values while it lives.
// Thread-safe. The bits layout is kernels/cuda/bitpack.h's (uint32 words, I32 tensor).
#pragma once
#include <cstddef>

#include "spikemesh/core/tensor.h"

namespace sm {

// Records `bits` (I32 [ceil(numel / 32)]) as the packing of `spikes` (a fresh tensor: its
// data starts its storage block). Replaces an entry at the same address.
void spike_bits_remember(const Tensor& spikes, const Tensor& bits);

// The bits recorded for x (same data address, numel and dtype), or an undefined tensor.
Tensor spike_bits_find(const Tensor& x);

// The block at `block` was freed: drops its entry (called by the device allocator).
void spike_bits_forget(const void* block);

// Entries currently recorded (tests).
size_t spike_bits_entries();

}  // namespace sm
