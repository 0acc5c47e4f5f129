// isa.cpp — the switch between the own kernels' AVX2 and AVX-512 variants (isa.h).
#include "spikemesh/kernels/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "spikemesh/core/error.h"

namespace sm::cpu {
namespace {

// Read once when the library loads (test binaries follow it too); a bad value counts as on
// here, the program refuses it at start-up (apply_cpu_isa_env).
std::atomic<bool> g_allow{[] {
  const char* e = std::getenv("SPIKEMESH_CPU_AVX512");
  return !(e && std::string(e) == "0");
}()};

bool cpu_has_avx512() {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

}  // namespace

bool avx512_kernels() { return cpu_has_avx512() && g_allow.load(std::memory_order_relaxed); }

void allow_avx512_kernels(bool allow) { g_allow.store(allow); }

void apply_cpu_isa_env() {
  const char* e = std::getenv("SPIKEMESH_CPU_AVX512");
  if (!e) return;
  const std::string v = e;
  if (v != "0" && v != "1")
    SM_INPUT_ERROR("SPIKEMESH_CPU_AVX512=" << v << ": expected 1 (on where the CPU has AVX-512, the default) or 0 (off)");
  allow_avx512_kernels(v == "1");
}

}  // namespace sm::cpu
