// test_neuron_variant.cpp — host-side choices around the GPU neuron kernels that need no GPU:
// which kernel family a call runs (kernels/neuron_variant.h: vector width, 32-bit indexing,
// alignment, whole bit words) and the registry of spike bits a neuron wrote for the next
// layer (core/spike_bits_cache.h: found only for the same address, numel and dtype; dropped
// when the block is freed).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>

#include "spikemesh/core/spike_bits_cache.h"
#include "spikemesh/kernels/neuron_variant.h"

namespace sm {
namespace {

const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

TEST(NeuronVariant, VectorWidthPerType) {
  EXPECT_EQ(neuron_variant::forward_neurons_per_thread(4), 4);  // float4
  EXPECT_EQ(neuron_variant::forward_neurons_per_thread(2), 8);  // 8 x bf16 / f16
  EXPECT_EQ(neuron_variant::backward_neurons_per_thread(4), 2);  // register budget: no spills
  EXPECT_EQ(neuron_variant::backward_neurons_per_thread(2), 2);
}

TEST(NeuronVariant, VectorWidthNeedsDivisibleMAndAlignedPointers) {
  EXPECT_EQ(neuron_variant::vector_width(1024, 4, 4, {at(0x1000), at(0x2000)}), 4);
  EXPECT_EQ(neuron_variant::vector_width(1022, 4, 4, {at(0x1000)}), 1) << "M not a multiple of 4";
  EXPECT_EQ(neuron_variant::vector_width(1024, 4, 4, {at(0x1000), at(0x2004)}), 1) << "one pointer off 16 bytes";
  EXPECT_EQ(neuron_variant::vector_width(1024, 2, 8, {at(0x1008)}), 1) << "bf16: 16-byte alignment";
  EXPECT_EQ(neuron_variant::vector_width(1024, 2, 4, {at(0x1008)}), 4) << "bf16 x4: 8-byte alignment";
  EXPECT_EQ(neuron_variant::vector_width(1024, 4, 4, {nullptr, at(0x1000)}), 4) << "null pointers are not checked";
  EXPECT_EQ(neuron_variant::vector_width(1024, 4, 1, {at(0x1001)}), 1);
}

TEST(NeuronVariant, ThirtyTwoBitIndexOnlyWhereItFits) {
  EXPECT_TRUE(neuron_variant::fits_index32(10, 1 << 20, 4));
  EXPECT_TRUE(neuron_variant::fits_index32(0, 1LL << 40, 4));
  EXPECT_TRUE(neuron_variant::fits_index32(1, INT32_MAX - 4, 4));
  EXPECT_FALSE(neuron_variant::fits_index32(1, INT32_MAX - 3, 4));
  EXPECT_FALSE(neuron_variant::fits_index32(1024, 1 << 21, 4)) << "2^31 elements";
  EXPECT_TRUE(neuron_variant::fits_index32(1023, 1 << 21, 4));
}

TEST(NeuronVariant, FastForwardNeedsWholeBitWords) {
  EXPECT_TRUE(neuron_variant::forward_fast(8, 1024, 4, true, {at(0x100)}));
  EXPECT_FALSE(neuron_variant::forward_fast(8, 1000, 4, true, {at(0x100)})) << "bits: M % 32 != 0";
  EXPECT_TRUE(neuron_variant::forward_fast(8, 1000, 4, false, {at(0x100)}));
  EXPECT_FALSE(neuron_variant::forward_fast(8, 1004, 2, false, {at(0x100)})) << "bf16: M % 8 != 0";
  EXPECT_TRUE(neuron_variant::backward_fast(8, 1004, 2, {at(0x108)})) << "backward: 4 bf16 per thread";
  EXPECT_FALSE(neuron_variant::backward_fast(1LL << 20, 1LL << 20, 4, {at(0x100)})) << "64-bit sizes";
}

TEST(SpikeBitsCache, FoundOnlyForTheSameTensorUntilForgotten) {
  const size_t before = spike_bits_entries();
  Tensor spikes = Tensor::zeros({3, 40}, DType::F32);  // 120 elements: 4 words
  Tensor bits = Tensor::zeros({4}, DType::I32);
  spike_bits_remember(spikes, bits);
  EXPECT_EQ(spike_bits_entries(), before + 1);
  const Tensor found = spike_bits_find(spikes);
  ASSERT_TRUE(found.defined());
  EXPECT_EQ(found.raw(), bits.raw());
  EXPECT_EQ(spike_bits_find(spikes.view({120})).raw(), bits.raw()) << "a view of the same elements";
  EXPECT_FALSE(spike_bits_find(spikes.slice0(0, 2)).defined()) << "fewer elements";
  EXPECT_FALSE(spike_bits_find(spikes.slice0(1, 3)).defined()) << "another address";
  EXPECT_FALSE(spike_bits_find(Tensor::zeros({3, 40}, DType::F32)).defined()) << "another tensor";
  spike_bits_forget(spikes.raw());
  EXPECT_FALSE(spike_bits_find(spikes).defined());
  EXPECT_EQ(spike_bits_entries(), before);
  spike_bits_forget(spikes.raw());  // forgetting twice is harmless
}

TEST(SpikeBitsCache, DtypeMustMatchAndWordCountIsChecked) {
  Tensor spikes = Tensor::zeros({64}, DType::F32);
  spike_bits_remember(spikes, Tensor::zeros({2}, DType::I32));
  const Tensor same = spikes.view({64});
  EXPECT_TRUE(spike_bits_find(same).defined());
  Tensor other = Tensor::zeros({64}, DType::F64);
  EXPECT_FALSE(spike_bits_find(other).defined());
  EXPECT_THROW(spike_bits_remember(spikes, Tensor::zeros({3}, DType::I32)), Error);
  spike_bits_forget(spikes.raw());
}

}  // namespace
}  // namespace sm
