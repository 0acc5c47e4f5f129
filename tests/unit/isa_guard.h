// isa_guard.h — for tests that compare the own kernels' AVX2 and AVX-512 copies
// (kernels/cpu/isa.h): restores whether the AVX-512 copies were allowed (SPIKEMESH_CPU_AVX512
// may have turned them off for the whole test binary) when the test ends.
#pragma once

#include <cstring>
#include <vector>

#include "spikemesh/kernels/cpu/isa.h"

namespace sm::test {

struct IsaGuard {
  const bool allowed = cpu::avx512_kernels_allowed();
  ~IsaGuard() { cpu::allow_avx512_kernels(allowed); }
  // Whether this CPU and build have the AVX-512 copies at all (allowing them for the check).
  static bool avx512_available() {
    IsaGuard g;
    cpu::allow_avx512_kernels(true);
    return cpu::avx512_kernels();
  }
};

// Bytes equal (a bitwise comparison: +0 and −0 differ, equal NaNs match).
template <typename T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace sm::test
