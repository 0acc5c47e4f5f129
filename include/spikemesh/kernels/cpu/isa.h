// isa.h — which vector registers spikemesh's own CPU kernels use. The spike-convolution sums
// and the neuron sweeps, written for AVX2 (the build's baseline, MARCH=x86-64-v3), also have an
// AVX-512 copy compiled under a target pragma (GCC builds); it runs where the CPU has AVX-512
// F, DQ, VL and BW (x86-64-v4) unless turned off. Each copy does the same operations per element
// in the same order, so results are bitwise equal with either (tests compare the two). oneDNN
// chooses its own instruction set (ONEDNN_MAX_CPU_ISA limits it).
#pragma once

namespace sm::cpu {

// True when the AVX-512 copies run: built with them, the CPU has AVX-512 F/DQ/VL/BW, and they
// were not turned off (allow_avx512_kernels(false) or SPIKEMESH_CPU_AVX512=0).
bool avx512_kernels();

// Turns the AVX-512 copies off or back on (tests compare both; effective only where the CPU
// has them), and whether they are allowed now (what a test restores).
void allow_avx512_kernels(bool allow);
bool avx512_kernels_allowed();

// The register width the own kernels use now: "avx512" or "avx2" (bench records it).
const char* own_kernels_isa();

// The most oneDNN may use on this CPU under ONEDNN_MAX_CPU_ISA, by oneDNN's name for it
// ("avx2", "avx512_core", "avx512_core_bf16", ...; bench records it).
const char* onednn_isa();

// SPIKEMESH_CPU_AVX512=1|0 applied at start-up (InputError naming it for any other value).
void apply_cpu_isa_env();

}  // namespace sm::cpu
