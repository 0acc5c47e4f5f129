// neuron_variant.h — which compiled variant of the GPU neuron kernels a call runs
// (kernels/cuda/neuron.h): pure host functions, no CUDA, so the CPU tests check them.
//
// The fast variants handle V consecutive neurons per thread with one 16-byte (forward) or
// up to 16-byte (backward) vector access per tensor and step, index in 32 bits and take
// reset mode, decay_input, surrogate and detach as template parameters. They run when
//  * T·M fits a signed 32-bit index (T·M + the vector width <= INT32_MAX),
//  * M is a multiple of V and every tensor pointer is aligned to V elements,
//  * (forward with spike bits) M is a multiple of 32, so each step's bits start on a word.
// Anything else runs the generic kernels (one neuron per thread, 64-bit indices, runtime
// flags): the same arithmetic, so the results are the same bits either way.
#pragma once
#include <climits>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace sm {
namespace neuron_variant {

// Bytes one thread moves per tensor and step: forward 16 (float4, 8 x bf16/f16); backward
// keeps kNeuronChunk steps of V neurons in registers, so it stops at 2 neurons (8 bytes for
// f32, 4 for 16-bit types): with 4, ptxas (sm_90, 128 registers at two blocks of 256 per SM)
// spilled 150–800 bytes per thread in every backward variant; with 2 it spills none.
constexpr int kForwardVectorBytes = 16;
constexpr int kBackwardMaxNeurons = 2;

inline int forward_neurons_per_thread(size_t elem_bytes) { return static_cast<int>(kForwardVectorBytes / elem_bytes); }
inline int backward_neurons_per_thread(size_t elem_bytes) {
  const int v = static_cast<int>(kForwardVectorBytes / elem_bytes);
  return v < kBackwardMaxNeurons ? v : kBackwardMaxNeurons;
}

// Whether T·M elements (plus one vector) are addressed with 32-bit indices.
inline bool fits_index32(int64_t steps, int64_t M, int vec) {
  return steps >= 0 && M >= 0 && (M == 0 || steps <= (static_cast<int64_t>(INT32_MAX) - vec) / M);
}

// V (> 1) when M is a multiple of V and every non-null pointer is aligned to V elements of
// elem_bytes; else 1 (the generic kernels).
inline int vector_width(int64_t M, size_t elem_bytes, int vec, std::initializer_list<const void*> ptrs) {
  if (vec <= 1 || M % vec != 0) return 1;
  const uintptr_t align = static_cast<uintptr_t>(vec) * elem_bytes;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % align != 0) return 1;
  return vec;
}

// The fast forward applies: vectors, 32-bit indices, and bits only when M % 32 == 0.
inline bool forward_fast(int64_t steps, int64_t M, size_t elem_bytes, bool with_bits,
                         std::initializer_list<const void*> ptrs) {
  const int v = forward_neurons_per_thread(elem_bytes);
  return vector_width(M, elem_bytes, v, ptrs) == v && fits_index32(steps, M, v) && (!with_bits || M % 32 == 0);
}
inline bool backward_fast(int64_t steps, int64_t M, size_t elem_bytes, std::initializer_list<const void*> ptrs) {
  const int v = backward_neurons_per_thread(elem_bytes);
  return vector_width(M, elem_bytes, v, ptrs) == v && fits_index32(steps, M, v);
}

}  // namespace neuron_variant
}  // namespace sm
