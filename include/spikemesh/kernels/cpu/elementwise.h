// elementwise.h — small elementwise CPU kernels (f32/f64) shared by layers and trainers.
#pragma once
#include "spikemesh/core/tensor.h"

namespace sm::cpu {

Tensor add(const Tensor& a, const Tensor& b);   // a + b (same shape and dtype), fresh tensor
void add_inplace(Tensor& acc, const Tensor& x);  // acc += x
void scale_inplace(Tensor& x, double s);         // x *= s
double sum(const Tensor& x);                     // deterministic (fixed block order), in double

}  // namespace sm::cpu
