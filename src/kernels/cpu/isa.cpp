// isa.cpp — the switch between the own kernels' AVX2 and AVX-512 variants, and the names of
// the instruction sets in use (isa.h).
#include "spikemesh/kernels/cpu/isa.h"

#include <atomic>

#include <dnnl.hpp>

#include "spikemesh/core/env_switch.h"

namespace sm::cpu {
namespace {

// Read once when the library loads (test binaries follow it too); a bad value counts as on
// here, the program refuses it at start-up (apply_cpu_isa_env).
std::atomic<bool> g_allow{env_switch_on("SPIKEMESH_CPU_AVX512")};

// Every feature the AVX-512 copies are compiled for (their target pragmas): F, DQ, VL, BW (the
// AVX-512 of x86-64-v4; GCC's own vectorisation may use any of them).
bool cpu_has_avx512() {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

}  // namespace

bool avx512_kernels() { return cpu_has_avx512() && g_allow.load(std::memory_order_relaxed); }

void allow_avx512_kernels(bool allow) { g_allow.store(allow); }

bool avx512_kernels_allowed() { return g_allow.load(std::memory_order_relaxed); }

const char* own_kernels_isa() { return avx512_kernels() ? "avx512" : "avx2"; }

const char* onednn_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

void apply_cpu_isa_env() {
  apply_env_switch("SPIKEMESH_CPU_AVX512", "on where the CPU has AVX-512, the default", allow_avx512_kernels);
}

}  // namespace sm::cpu
