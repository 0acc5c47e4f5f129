// fused_epilogue.cpp — when a batch norm and the neuron or max pooling after it run fused
// (fused_epilogue.h), on the CPU or (batch norm → neuron) on a GPU.
#include "spikemesh/layers/fused_epilogue.h"

#include <atomic>
#include <chrono>

#include "spikemesh/core/env_switch.h"
#include "spikemesh/core/error.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/layer_profile.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/pool.h"

namespace sm {
namespace {
// Read once when the library loads (test binaries follow it too); on unless SPIKEMESH_FUSE=0
// — a bad value counts as on here, the program refuses it at start-up (apply_fused_epilogues_env).
std::atomic<bool> g_fuse{env_switch_on("SPIKEMESH_FUSE")};
}  // namespace

bool fused_epilogues() { return g_fuse.load(std::memory_order_relaxed); }
void set_fused_epilogues(bool on) { g_fuse.store(on); }

void apply_fused_epilogues_env() { apply_env_switch("SPIKEMESH_FUSE", "on, the default", set_fused_epilogues); }

bool fusable_forward(const Ctx& ctx) { return !ctx.time_grad_carry;
}

bool fused_epilogue_applies(const FuseQuery& q) {
  if (!q.enabled || !q.fusable || !q.unsharded) return false;
  if (q.on_gpu)
    return q.next_is_neuron && !q.input_is_spikes && !q.profiling &&
           (q.dtype == DType::F32 || q.dtype == DType::BF16 || q.dtype == DType::F16);
  if (q.dtype != DType::F32 && q.dtype != DType::F64) return false;
  return q.next_is_neuron || (q.next_is_max_pool && q.ndim == 5);  // pooling: [T, N, C, H, W] only
}

bool try_fused_forward(Layer& a, Layer& b, const Tensor& x, Ctx& ctx, Tensor& y) {
  auto* bn = dynamic_cast<BatchNorm*>(&a);
  if (!bn || !x.defined() || !BatchNorm::fusable_after_batchnorm(b)) return false;
  FuseQuery q;
  q.enabled = fused_epilogues();
  q.fusable = fusable_forward(ctx);
  q.unsharded = bn->sp_link().role == SpRole::None && b.sp_link().role == SpRole::None;
  q.on_gpu = x.device().is_cuda();
  q.next_is_neuron = dynamic_cast<Neuron*>(&b) != nullptr;
  q.next_is_max_pool = dynamic_cast<Pool2d*>(&b) != nullptr;
  q.input_is_spikes = x.is_binary();
  q.profiling = layer_profile_enabled();
  q.dtype = x.dtype();
  q.ndim = x.ndim();
  if (!fused_epilogue_applies(q)) return false;
  if (!layer_profile_enabled()) {
    y = bn->forward_into(b, x, ctx);
    return true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  y = bn->forward_into(b, x, ctx);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  layer_profile_add(bn->type() + "+" + b.type(), ms, 0.0, true, 0.0, bn->name() + "+" + b.name());
  return true;
}

}  // namespace sm
