// elementwise.cpp — add / accumulate / scale / sum over contiguous f32 or f64 tensors.
// sum() uses fixed 4096-element blocks reduced in order, so the result does not depend on
// the number of threads.
#include "spikemesh/kernels/cpu/elementwise.h"

#include <vector>

namespace sm::cpu {

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  SM_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype(),
           op << ": " << shape_str(a.shape()) << " " << dtype_name(a.dtype()) << " vs "
              << shape_str(b.shape()) << " " << dtype_name(b.dtype()));
}

template <typename T>
void add_impl(const T* a, const T* b, T* c, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

template <typename T>
double sum_impl(const T* x, int64_t n) {
  constexpr int64_t kBlock = 4096;
  int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(nb, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    double s = 0.0;
    int64_t e = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < e; ++i) s += x[i];
    part[b] = s;
  }
  double s = 0.0;
  for (double p : part) s += p;
  return s;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  check_same(a, b, "add");
  Tensor c = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (a.dtype() == DType::F32)
    add_impl(a.data<float>(), b.data<float>(), c.data<float>(), a.numel());
  else
    add_impl(a.data<double>(), b.data<double>(), c.data<double>(), a.numel());
  return c;
}

void add_inplace(Tensor& acc, const Tensor& x) {
  check_same(acc, x, "add_inplace");
  if (acc.dtype() == DType::F32)
    add_impl(acc.data<float>(), x.data<float>(), acc.data<float>(), acc.numel());
  else
    add_impl(acc.data<double>(), x.data<double>(), acc.data<double>(), acc.numel());
}

void scale_inplace(Tensor& x, double s) {
  int64_t n = x.numel();
  if (x.dtype() == DType::F32) {
    float* p = x.data<float>();
    float f = static_cast<float>(s);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  } else {
    double* p = x.data<double>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] *= s;
  }
}

double sum(const Tensor& x) {
  if (x.dtype() == DType::F32) return sum_impl(x.data<float>(), x.numel());
  return sum_impl(x.data<double>(), x.numel());
}

}  // namespace sm::cpu
