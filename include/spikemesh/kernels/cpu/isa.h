// isa.h — which vector registers spikemesh's own CPU kernels use. Kernels written for AVX2
// (the build's baseline, MARCH=x86-64-v3) also have an AVX-512 variant compiled under a target
// pragma (GCC builds); it runs where the CPU has AVX-512F unless turned off. Each variant does
// the same operations per element in the same order, so results are bitwise equal with either
// (tests compare the two). oneDNN chooses its own instruction set.
#pragma once

namespace sm::cpu {

// True when the own kernels' AVX-512 variants run: built with them, the CPU has AVX-512F, and
// they were not turned off (allow_avx512_kernels(false) or SPIKEMESH_CPU_AVX512=0).
bool avx512_kernels();

// Turns the AVX-512 variants off or back on (tests compare both; effective only where the CPU
// has them).
void allow_avx512_kernels(bool allow);

// SPIKEMESH_CPU_AVX512=1|0 applied at start-up (InputError naming it for any other value).
void apply_cpu_isa_env();

}  // namespace sm::cpu
