// tensor_parallel.cpp — the tensor-parallel rules of layers/tensor_parallel.h and the
// channel-bias epilogue they need (CPU loop here; CUDA through kernels/cuda/gemm_cublas.h).
#include "spikemesh/layers/tensor_parallel.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "spikemesh/layers/collectives.h"

#include "device_ops.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#endif

namespace sm {
namespace {

template <typename T>
void add_channel_bias_cpu(const T* bias, const ChannelLayout& l, T* y) {
  const int64_t rows = l.outer * l.channels;
#pragma omp parallel for schedule(static) if (rows * l.inner > 32768)
  for (int64_t oc = 0; oc < rows; ++oc) {
    const T b = bias[oc % l.channels];
    T* p = y + oc * l.inner;
    for (int64_t i = 0; i < l.inner; ++i) p[i] += b;
  }
}

}  // namespace

// (tensor_parallel.h) one line per (layer, direction), printed by tp rank 0 only.
void tp_debug_note(const Ctx& ctx, const Param& weight, const char* direction, size_t bytes, const char* op) {
  if (!ctx.tp_debug_comm || ctx.tp->rank() != 0) return;
  static std::mutex mu;
  static std::set<std::string> seen;
  std::string layer = weight.name;
  if (const size_t dot = layer.rfind('.'); dot != std::string::npos) layer.resize(dot);  // drop ".weight"
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(layer + "/" + direction).second) return;
  std::fprintf(stderr, "tp-comm: %-44s %-8s %-14s %12lld bytes over %d ranks (%s)\n", layer.c_str(), direction, op,
               static_cast<long long>(bytes), ctx.tp->size(),
               direction[0] != 'f' ? "colwise input gradient"
               : std::string(op) == "all_gather" ? "colwise output channels" : "rowwise partial outputs");
}

TpMode tp_mode(const Param& weight, const Ctx& ctx) {
  const auto g = weight.shard.group;
  if (!ctx.tp || !weight.shard.sharded() || (g != ShardSpec::Group::TP && g != ShardSpec::Group::TPxDP))
    return TpMode::None;
  return weight.shard.dim == tp_split_dim(TpMode::Colwise) ? TpMode::Colwise : TpMode::Rowwise;
}

int tp_split_dim(TpMode m) { return m == TpMode::Colwise ? 0 : m == TpMode::Rowwise ? 1 : -1; }

TpForward tp_forward_plan(const Param& weight, const Param* bias, const Ctx& ctx, bool kernel_adds_bias) {
  TpForward p;
  p.mode = tp_mode(weight, ctx);
  p.weight = &weight;
  if (bias) {
    const bool fused = kernel_adds_bias && p.mode != TpMode::Rowwise;
    (fused ? p.kernel_bias : p.late_bias) = &bias->value;
  }
  return p;
}

void tp_finish_forward(const TpForward& plan, Ctx& ctx, Tensor& y, const ChannelLayout& layout) {
  if (plan.mode == TpMode::Rowwise) {
    tp_debug_note(ctx, *plan.weight, "forward", y.nbytes(), "all_reduce");
    ctx.tp->all_reduce_sum(y);  // partial sums over the input shards
  }
  if (plan.late_bias) add_channel_bias(y, *plan.late_bias, layout);  // after the reduction: once
}

void tp_finish_backward_input(const Param& weight, Ctx& ctx, Tensor& dx, bool defer) {
  if (tp_mode(weight, ctx) == TpMode::Colwise && !defer) {
    tp_debug_note(ctx, weight, "backward", dx.nbytes(), "all_reduce");
    ctx.tp->all_reduce_sum(dx);
  }
}

Tensor tp_gather_channels(Ctx& ctx, const Param& weight, const Tensor& y_local, const Shape& whole,
                          const ChannelLayout& local) {
  SM_CHECK(ctx.tp, "'" << weight.name << "' is colwise with a gathered output but the step has no tp group");
  const int p = ctx.tp->size();
  SM_CHECK(shape_numel(whole) == y_local.numel() * p, "gathering " << shape_str(y_local.shape()) << " over tp " << p
                                                                   << " into " << shape_str(whole));
  tp_debug_note(ctx, weight, "forward", y_local.nbytes() * p, "all_gather");
  Tensor chunks = Tensor::empty({p * y_local.numel()}, y_local.dtype(), y_local.device());  // [tp, outer·Cl·inner]
  ctx.tp->all_gather(y_local.view({y_local.numel()}), chunks);  // collective over tp
  Tensor y = Tensor::empty(whole, y_local.dtype(), y_local.device());  // [outer, Cl·tp, inner]
  const layer_ops::ChannelBlock b{local.outer, local.inner, local.channels};
  for (int r = 0; r < p; ++r)
    layer_ops::copy_channels(chunks.slice0(r * y_local.numel(), (r + 1) * y_local.numel()), local.channels, 0, y,
                             local.channels * p, r * local.channels, b);
  return y;
}

Tensor tp_channel_block(const Ctx& ctx, const Tensor& dy, const Shape& local_shape, const ChannelLayout& local) {
  const int p = ctx.tp->size();
  Tensor out = Tensor::empty(local_shape, dy.dtype(), dy.device());  // [outer, Cl, inner]
  const layer_ops::ChannelBlock b{local.outer, local.inner, local.channels};
  layer_ops::copy_channels(dy, local.channels * p, ctx.tp->rank() * local.channels, out, local.channels, 0, b);
  return out;
}

void add_channel_bias(Tensor& y, const Tensor& bias, const ChannelLayout& layout) {
  SM_CHECK(y.numel() == layout.outer * layout.channels * layout.inner && bias.numel() == layout.channels,
           "channel bias of " << bias.numel() << " for an output " << shape_str(y.shape()));
#ifdef SPIKEMESH_HAVE_CUDA
  if (y.device().is_cuda()) {
    cuda::add_channel_bias(y.raw(), y.dtype(), bias.raw(), bias.dtype(), layout.outer, layout.channels, layout.inner,
                           cuda::stream_for(y.device()));
    return;
  }
#endif
  if (y.dtype() == DType::F32)
    add_channel_bias_cpu(bias.data<float>(), layout, y.data<float>());
  else
    add_channel_bias_cpu(bias.data<double>(), layout, y.data<double>());
}

}  // namespace sm
