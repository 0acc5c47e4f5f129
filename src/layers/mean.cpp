// mean.cpp — Mean over one per-sample dim of [T, N, ...]: viewed as [outer, D, inner],
// y[o, i] = (1/D) · Σ_d x[o, d, i] (summed in the tensor's type, f32 or f64, in index order),
// dx[o, d, i] = dy[o, i] / D. Saves the input shape per slot; B releases it.
#include "spikemesh/layers/mean.h"

#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

// dim resolved against the per-sample shape (x without [T, N]).
int resolve(int dim, size_t per_sample_rank) {
  const int r = static_cast<int>(per_sample_rank);
  return dim < 0 ? dim + r : dim;
}

using Geometry = Mean::View;

template <typename T>
void mean_forward(const T* x, const Geometry& g, T* y) {
  const T scale = T(1) / static_cast<T>(g.d);
#pragma omp parallel for if (g.outer * g.inner > 4096)
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.inner; ++i) {
      T s = 0;
      for (int64_t d = 0; d < g.d; ++d) s += x[(o * g.d + d) * g.inner + i];
      y[o * g.inner + i] = s * scale;
    }
}

template <typename T>
void mean_backward(const T* dy, const Geometry& g, T* dx) {
  const T scale = T(1) / static_cast<T>(g.d);
#pragma omp parallel for if (g.outer * g.inner > 4096)
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t d = 0; d < g.d; ++d)
      for (int64_t i = 0; i < g.inner; ++i) dx[(o * g.d + d) * g.inner + i] = dy[o * g.inner + i] * scale;
}

SlotStore<Shape>& slots_of(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<SlotStore<Shape>>();
  return *static_cast<SlotStore<Shape>*>(p.get());
}

}  // namespace

Mean::Mean(int dim) : dim_(dim) {}

Mean::View Mean::view_of(const Shape& x) const {
  const int d = resolve(dim_, x.size() - 2);
  SM_CHECK(x.size() >= 3 && d >= 0 && d < static_cast<int>(x.size()) - 2,
           "mean dim " << dim_ << " out of range for " << shape_str(x));
  View g;
  const size_t axis = 2 + static_cast<size_t>(d);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i < axis) g.outer *= x[i];
    else if (i == axis) g.d = x[i];
    else g.inner *= x[i];
  }
  return g;
}

Shape Mean::output_shape(const Shape& in) const {
  const int r = static_cast<int>(in.size());
  const int d = resolve(dim_, in.size());
  if (r < 1 || d < 0 || d >= r)
    SM_INPUT_ERROR("mean over dim " << dim_ << " does not fit the per-sample input " << shape_str(in));
  Shape out;
  for (int i = 0; i < r; ++i)
    if (i != d) out.push_back(in[i]);
  return out;
}

Tensor Mean::forward_cpu(const Tensor& x, Ctx& ctx) {
  SM_CHECK(x.ndim() >= 3, "mean input must be [T, N, ...], got " << shape_str(x.shape()));
  const Geometry g = view_of(x.shape());
  Shape out_shape = {x.dim(0), x.dim(1)};
  for (const int64_t s : output_shape(Shape(x.shape().begin() + 2, x.shape().end()))) out_shape.push_back(s);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());  // [T, N, ...without dim]
  if (x.dtype() == DType::F64) mean_forward(x.data<double>(), g, y.data<double>());
  else mean_forward(x.data<float>(), g, y.data<float>());
  slots_of(impl_).fresh(ctx.slot) = x.shape();
  return y;
}

Tensor Mean::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  auto& store = slots_of(impl_);
  const Shape in = store.get(ctx.slot);
  store.release(ctx.slot);
  const Geometry g = view_of(in);
  SM_CHECK(dy.numel() == g.outer * g.inner, "mean backward: dy " << shape_str(dy.shape()) << " does not match input "
                                                                 << shape_str(in));
  Tensor dx = Tensor::empty(in, dy.dtype(), dy.device());  // [T, N, ...]
  if (dy.dtype() == DType::F64) mean_backward(dy.data<double>(), g, dx.data<double>());
  else mean_backward(dy.data<float>(), g, dx.data<float>());
  return dx;
}

}  // namespace sm
