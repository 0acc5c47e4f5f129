// rng.h — counter-based randomness (Philox4x32-10). Every random number that touches
// training is a pure function of (seed, purpose, name, counters): never of rank or of
// thread schedule, so any parallel layout draws exactly the same numbers (docs/architecture.md §3).
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace sm {

using Philox4 = std::array<uint32_t, 4>;

Philox4 philox4x32(Philox4 counter, std::array<uint32_t, 2> key);

// 64-bit FNV-1a of a string, used to turn purposes and parameter names into keys.
uint64_t hash_name(const std::string& s);

// A stream of random numbers for one purpose: key = (seed, purpose-hash). Element i of
// sub-stream (a, b) is drawn from counter (i, a, b) so it can be evaluated out of order.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream);
  CounterRng(uint64_t seed, const std::string& purpose) : CounterRng(seed, hash_name(purpose)) {}

  // Four 32-bit words for element index i in sub-stream (a, b).
  Philox4 bits(uint64_t i, uint32_t a = 0, uint32_t b = 0) const;
  // Uniform in [0, 1) with 53-bit resolution (double) for element i.
  double uniform(uint64_t i, uint32_t a = 0, uint32_t b = 0) const;
  // Standard normal for element i (Box-Muller on the element's own counter).
  double normal(uint64_t i, uint32_t a = 0, uint32_t b = 0) const;

 private:
  std::array<uint32_t, 2> key_;
};

}  // namespace sm
