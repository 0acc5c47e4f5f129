// time_invariant_prefix.cpp — the prefix run once for repeated time steps
// (time_invariant_prefix.h): the test of the input's bytes and the repeat and sum over T.
#include "spikemesh/layers/time_invariant_prefix.h"

#include <atomic>
#include <cstring>

#include "spikemesh/core/env_switch.h"
#include "spikemesh/layers/neuron.h"

namespace sm {
namespace {

std::atomic<bool> g_merge{env_switch_on("SPIKEMESH_MERGE_STEPS")};
std::atomic<int64_t> g_merged_runs{0};

bool steps_repeat(const Tensor& x) {
  const int64_t T = x.dim(0);
  const size_t bytes = static_cast<size_t>(x.numel() / T) * dtype_size(x.dtype());
  const char* p = static_cast<const char*>(x.raw());
  for (int64_t t = 1; t < T; ++t)
    if (std::memcmp(p, p + t * bytes, bytes) != 0) return false;
  return true;
}

template <typename T>
void sum_steps(const T* g, int64_t steps, int64_t per_step, T* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < per_step; ++i) {
    T s = g[i];
    for (int64_t t = 1; t < steps; ++t) s += g[t * per_step + i];
    out[i] = s;
  }
}

}  // namespace

bool merge_repeated_steps_enabled() { return g_merge.load(std::memory_order_relaxed); }
void set_merge_repeated_steps(bool on) { g_merge.store(on); }
int64_t merged_prefix_runs() { return g_merged_runs.load(); }

void apply_merge_steps_env() { apply_env_switch("SPIKEMESH_MERGE_STEPS", "on, the default", set_merge_repeated_steps); }

size_t time_invariant_prefix(const std::vector<LayerPtr>& children, const Tensor& x, const Ctx& ctx) {
  if (!merge_repeated_steps_enabled() || !x.defined() || !x.device().is_cpu() || x.ndim() < 3 || x.dim(0) < 2 || ctx.tp != nullptr) return 0;
  if (x.dtype() != DType::F32 && x.dtype() != DType::F64) return 0;
  if (ctx.time_grad_carry || ctx.bn_moments_for || ctx.bn_grad_sums_for || ctx.bn_split || ctx.time_repeat != 1)
    return 0;
  size_t k = 0;
  while (k < children.size() && !dynamic_cast<const Neuron*>(children[k].get())) {
    const Layer& l = *children[k];
    if (!l.same_at_every_time_step() || l.sp_link().role != SpRole::None) return 0;
    ++k;
  }
  if (k == 0 || k == children.size()) return 0;
  if (!steps_repeat(x)) return 0;
  g_merged_runs.fetch_add(1);
  return k;
}

Tensor repeat_time_steps(const Tensor& x, int64_t T) {
  SM_CHECK(x.ndim() >= 1 && x.dim(0) == 1, "repeat over time: expected one step, got " << shape_str(x.shape()));
  Shape s = x.shape();
  s[0] = T;
  Tensor y = Tensor::empty(s, x.dtype(), x.device());
  const size_t bytes = static_cast<size_t>(x.numel()) * dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * bytes, src, bytes);
  return y;
}

Tensor sum_time_steps(const Tensor& g) {
  SM_CHECK(g.ndim() >= 1 && g.dim(0) >= 1, "sum over time: no time dimension in " << shape_str(g.shape()));
  Shape s = g.shape();
  const int64_t T = s[0], per_step = g.numel() / T;
  s[0] = 1;
  Tensor out = Tensor::empty(s, g.dtype(), g.device());
  if (g.dtype() == DType::F64)
    sum_steps(g.data<double>(), T, per_step, out.data<double>());
  else
    sum_steps(g.data<float>(), T, per_step, out.data<float>());
  return out;
}

}  // namespace sm
