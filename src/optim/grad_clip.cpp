// grad_clip.cpp — global L2 grad norm (deterministic blocked sums in double) and scaling.
#include "spikemesh/optim/grad_clip.h"
#include "spikemesh/optim/optimizer_cuda.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sm {
namespace {

constexpr int64_t kNormBlock = 8192;         // elements per partial sum (fixed: determinism)
constexpr int64_t kScaleParallelMin = 16384;  // smaller grads are scaled on one thread

// Sum of squares of g[0..n): one partial per fixed block, partials added in block order.
template <typename T>
double squared_sum(const T* g, int64_t n) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kNormBlock);
    double acc = 0.0;
    for (int64_t i = b * kNormBlock; i < end; ++i) {
      const double x = g[i];
      acc += x * x;
    }
    partial[static_cast<size_t>(b)] = acc;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

template <typename T>
void scale(T* g, int64_t n, double factor) {
#pragma omp parallel for schedule(static) if (n >= kScaleParallelMin)
  for (int64_t i = 0; i < n; ++i) g[i] = static_cast<T>(static_cast<double>(g[i]) * factor);
}

void check_grad(const Param& p) {
  SM_CHECK(p.grad.defined(), "param '" << p.name << "' has no grad storage");
  SM_CHECK(p.grad.device().is_cpu(), "param '" << p.name << "': grad is on " << p.grad.device().str()
                                               << "; clip_grad_norm takes CPU grads");
  SM_CHECK(p.grad.dtype() == DType::F32 || p.grad.dtype() == DType::F64,
           "param '" << p.name << "': grad dtype " << dtype_name(p.grad.dtype()) << " (need f32/f64)");
}

}  // namespace

double clip_grad_norm(const std::vector<Param*>& params, double max_norm, Collectives* group,
                      const std::vector<Param*>* counted) {
  if (!params.empty() && params.front() != nullptr && params.front()->grad.device().is_cuda())
    return clip_grad_norm_cuda(params, max_norm, group, counted);
  for (const Param* p : params) SM_CHECK(p != nullptr, "clip_grad_norm: null param");
  double sum_sq = 0.0;
  for (const Param* p : counted ? *counted : params) {
    SM_CHECK(p != nullptr, "clip_grad_norm: null param");
    check_grad(*p);
    const int64_t n = p->grad.numel();
    sum_sq += p->grad.dtype() == DType::F64 ? squared_sum(p->grad.data<double>(), n)
                                            : squared_sum(p->grad.data<float>(), n);
  }
  if (group != nullptr) {
    Tensor t = Tensor::full({1}, sum_sq, DType::F64);  // [1]
    group->all_reduce_sum(t);
    sum_sq = t.item();
  }
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0.0) {
    const double factor = max_norm / (norm + 1e-6);
    if (!(factor >= 1.0)) {  // clamp(factor, max=1); NaN propagates as in PyTorch
      for (Param* p : params) {
        const int64_t n = p->grad.numel();
        if (p->grad.dtype() == DType::F64)
          scale(p->grad.data<double>(), n, factor);
        else
          scale(p->grad.data<float>(), n, factor);
      }
    }
  }
  return norm;
}

}  // namespace sm
