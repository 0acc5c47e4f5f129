// max_pool_winner.h — the rule that picks a max-pooling window's winner (kernels/cpu/pool.h),
// shared by pool.cpp's kernels and the AVX-512 one (maxpool3s2_avx512.cpp): scanning the window
// in row-major order from its first real element, v replaces the best so far when it is larger,
// or when it is the first NaN (NaN then propagates); ties keep the first.
#pragma once

namespace sm::cpu {

template <typename T>
inline bool takes_over(T v, T best) {
  return (v > best) | ((v != v) & (best == best));
}

}  // namespace sm::cpu
