// batchnorm_cuda.cpp — BatchNorm1d/2d's CUDA hooks over helper kernels of
// kernels/cuda/batchnorm.h, composed exactly as layers/batchnorm.cpp does on the CPU (same
// shifted moments, running-statistics update, saved output-or-input choice, backward
// coefficients; per-channel vectors in double on the device). Activations f32, bf16 or f16;
// γ, β, running statistics and gradients f32.
//
// Fused with the neuron after it (forward_cuda_then, layers/fused_epilogue.h): the statistics
// as above, then the neuron reads x through the per-channel apply (kernels/cuda/neuron.h
// NeuronAffineCuda) and the normalised tensor is never written; batch norm keeps x, so the
// forward reads nothing back. Backward is the unfused one working from the saved input.
//
// Host synchronisation (unfused forwards only): the forward reads one flag back (may the
// output be kept instead of the input, decided per call as on the CPU) — one small
// device-to-host copy per unfused BN layer per forward. Synced BN (ctx.bn_sync) all-reduces
// the [C] sums through host memory.
// Under a CUDA graph capture (core/graph_capture_cuda.h) the flag is not read: the last
// eager training decision is repeated and guarded, and the running statistics are backed up
// inside the graph before their update.
#ifdef SPIKEMESH_HAVE_CUDA
#include "batchnorm_common.h"
#include "layer_util_cuda.h"
#include "spikemesh/core/graph_capture_cuda.h"
#include "spikemesh/kernels/cuda/batchnorm.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

using bn_detail::bn_shape;

// Rows of CudaSaved::stats (device double [kStatRows, C]).
enum StatRow { kMean = 0, kInvstd, kScale, kYScale, kYOffset, kDGamma, kDBeta, kStatRows };

struct CudaSaved : bn_detail::SavedBase {
  Tensor stats;                  // double [kStatRows, C]
  bool has_param_grads = false;  // B computed dγ, dβ
};

// The batch statistics of a checkpointed forward (rows kMean..kScale), kept for its recompute.
struct CudaKept {
  Tensor stats;  // double [kYScale, C]
  double count = 0.0;
};

// memopt splits: the sums the pieces of one segment add up (per slot), device doubles.
struct CudaSplit {
  Tensor moments;  // [2, C] Σ(x - rm), Σ(x - rm)²
  double count = 0.0;
  Tensor grads;    // [2, C] Σdy, Σdy·(x - μ); the whole group's once finished
};

struct CudaImpl {
  SlotStore<CudaSaved> slots;
  SlotStore<CudaKept> kept;    // written with keep(): no SlotCapture drops it
  SlotStore<CudaSplit> split;  // likewise
  CudaSplit& split_of(int slot, int64_t C, Device dev) {
    if (!split.has(slot)) {
      CudaSplit& a = split.keep(slot);
      a.moments = Tensor::zeros({2, C}, DType::F64, dev);
      a.grads = Tensor::zeros({2, C}, DType::F64, dev);
    }
    return split.get(slot);
  }
  int last_train_decision = -1;  // saved_output of the last eager training forward (-1: none)
};

CudaImpl& impl(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<CudaImpl>();
  return *static_cast<CudaImpl*>(p.get());
}

double* row(const Tensor& t, int r, int64_t C) { return t.data<double>() + r * C; }

// All-reduces the first `n` doubles of the device tensor `dev` (plus *extra, if given)
// through host memory, over coll's group.
void all_reduce_through_host(Collectives& coll, const Tensor& dev, int64_t n, double* extra) {
  Tensor host = Tensor::empty({n + (extra ? 1 : 0)}, DType::F64);  // [n (+1)]
  Tensor dev_flat = dev.view({dev.numel()}).slice0(0, n);
  host.slice0(0, n).copy_from(dev_flat);  // synchronous
  if (extra) host.data<double>()[n] = *extra;
  coll.all_reduce_sum(host);
  dev_flat.copy_from(host.slice0(0, n));
  if (extra) *extra = host.data<double>()[n];
}

// Σ(x - rm), Σ(x - rm)² per channel into sums [2, C] (shifted by the running mean rm).
void shifted_moments(const Tensor& x, const cpu::BnShape& s, const float* rm, const Tensor& sums, cudaStream_t st) {
  const int64_t C = s.channels;
  cuda_layer::dispatch_activation(x.dtype(), "batchnorm", [&](auto t) {
    using T = decltype(t);
    cuda::bn_shifted_moments_cuda<T>(static_cast<const T*>(x.raw()), s, rm, row(sums, 0, C), row(sums, 1, C), st);
  });
}

// A piece of a memopt split (ctx.bn_moments_for): its moments added to the slot's sums.
void add_piece_moments(CudaSplit& a, const Tensor& x, const cpu::BnShape& s, const float* rm, cudaStream_t st) {
  const int64_t C = s.channels;
  Tensor sums = Tensor::empty({2, C}, DType::F64, x.device());
  shifted_moments(x, s, rm, sums, st);
  cuda::accumulate(a.moments.raw(), DType::F64, sums.raw(), DType::F64, 2 * C, st);
  a.count += static_cast<double>(s.count());
}

// The running statistics a training forward moves (buffers running_mean, running_var,
// num_batches_tracked), γ and the layer's eps and momentum.
struct RunningStats {
  Tensor* buffers[3];  // running_mean, running_var, num_batches_tracked
  const float* gamma;
  double eps, momentum;
};

// Training: the batch statistics (all-reduced when synced) into sv.stats rows kMean..kScale,
// the running statistics moved (backed up first under a graph capture), sv.count the group's.
void batch_statistics(const Tensor& x, const cpu::BnShape& s, const Ctx& ctx, const RunningStats& run, CudaSaved& sv,
                      cudaStream_t st) {
  const int64_t C = s.channels;
  Tensor sums = Tensor::empty({2, C}, DType::F64, x.device());  // Σ(x - rm), Σ(x - rm)²
  double count = static_cast<double>(s.count());
  float* running_mean = run.buffers[0]->data<float>();
  shifted_moments(x, s, running_mean, sums, st);
  if (sv.synced) all_reduce_through_host(*ctx.bn_sync, sums, 2 * C, &count);
  SM_CHECK(count > 0, "batchnorm over an empty batch");
  if (GraphCapture* g = active_graph_capture())  // the running statistics before this update
    for (const Tensor* b : run.buffers) {
      Tensor copy = Tensor::empty(b->shape(), b->dtype(), b->device());
      copy.copy_from(*b);  // device to device, on the stream: captured
      g->backups.emplace_back(*b, copy);
    }
  cuda::bn_train_stats_cuda(row(sums, 0, C), row(sums, 1, C), count, C, run.eps, run.momentum, running_mean,
                            run.buffers[1]->data<float>(), run.buffers[2]->data<int64_t>(), run.gamma,
                            row(sv.stats, kMean, C), row(sv.stats, kInvstd, C), row(sv.stats, kScale, C), st);
  sv.count = count;
}

// Fused with the neuron after it: it normalises as it reads x; the slot keeps x (backward
// works from the saved input, no decision to read back).
Tensor forward_fused(CudaSaved& sv, const Tensor& x, const cpu::BnShape& s, const Tensor& beta, Layer* next, Ctx& ctx) {
  const int64_t C = s.channels;
  auto in = std::make_shared<cuda_layer::FusedBnApply>();
  in->stats = sv.stats;
  in->offset = beta.clone();  // β as of this forward
  in->kernel.center = row(sv.stats, kMean, C);
  in->kernel.scale = row(sv.stats, kScale, C);
  in->kernel.offset = in->offset.data<float>();
  in->kernel.channels = C;
  in->kernel.inner = s.inner;
  sv.saved_output = false;
  sv.act = x;
  return static_cast<Neuron*>(next)->forward_normalized_cuda(x, std::move(in), ctx);
}

// Unfused: y = (x - μ)·scale + β written; the slot keeps y when x is recoverable from it
// (read back, or under a graph capture the last eager training decision, guarded), else x.
Tensor normalize_and_save(CudaImpl& im, CudaSaved& sv, const Tensor& x, const cpu::BnShape& s, const float* gamma,
                          const float* beta, const Ctx& ctx, const std::string& name, cudaStream_t st) {
  const int64_t C = s.channels;
  const DType dt = x.dtype();
  Tensor y = Tensor::empty(x.shape(), dt, x.device());  // [T, N, C, ...]
  cuda_layer::dispatch_activation(dt, "batchnorm", [&](auto t) {
    using T = decltype(t);
    cuda::bn_normalize_cuda<T>(static_cast<const T*>(x.raw()), s, row(sv.stats, kMean, C), row(sv.stats, kScale, C),
                               beta, static_cast<T*>(y.raw()), st);
  });
  Tensor recoverable = Tensor::empty({1}, DType::I32, x.device());
  cuda::bn_output_recovery_cuda(gamma, beta, row(sv.stats, kScale, C), C, row(sv.stats, kYScale, C),
                                row(sv.stats, kYOffset, C), recoverable.data<int32_t>(), st);
  if (GraphCapture* g = active_graph_capture()) {  // no read-back: repeat the last eager decision
    if (!ctx.training || im.last_train_decision < 0)
      refuse_graph_capture("batchnorm '" + name + "' has no eager training forward to repeat");
    sv.saved_output = im.last_train_decision == 1;
    g->guards.push_back({"batchnorm '" + name + "'", recoverable, im.last_train_decision});
  } else {
    sv.saved_output = recoverable.item() != 0.0;  // synchronises (see the top comment)
    if (ctx.training && !ctx.recompute) im.last_train_decision = sv.saved_output ? 1 : 0;
  }
  sv.act = sv.saved_output ? y : x;              // keep the output: x may be freed now
  return y;
}

}  // namespace

Tensor BatchNorm::forward_cuda(const Tensor& x, Ctx& ctx) { return forward_cuda_then(x, ctx, nullptr); }

Tensor BatchNorm::forward_cuda_then(const Tensor& x, Ctx& ctx, Layer* next) {
  bn_detail::check_input(*this, x);
  cuda_layer::check_master(param(0).value, x, "batchnorm", name());
  CudaAllocLabel label("batchnorm forward", &name_);
  const cpu::BnShape s = bn_shape(x);
  const int64_t C = s.channels;
  cudaStream_t st = cuda_layer::stream_of(x);
  const float* gamma = param(0).value.data<float>();
  const float* beta = param(1).value.data<float>();

  CudaImpl& im = impl(cuda_impl_);
  if (ctx.training && ctx.bn_moments_for == this) {  // a piece of a split: its moments, nothing more
    add_piece_moments(im.split_of(ctx.slot, C, x.device()), x, s, buffer(0).value.data<float>(), st);
    return Tensor();
  }
  CudaSaved& sv = im.slots.fresh(ctx.slot);
  bn_detail::begin_saved(sv, ctx);
  sv.stats = Tensor::empty({kStatRows, C}, DType::F64, x.device());
  if (ctx.training && (ctx.recompute || ctx.bn_split)) {  // the kept statistics, no update
    CudaKept& k = im.kept.get(ctx.slot);
    sv.stats.slice0(0, kYScale).copy_from(k.stats);
    sv.count = k.count;
    if (!ctx.bn_split) im.kept.release(ctx.slot);
  } else if (ctx.training) {
    const RunningStats run{{&buffer(0).value, &buffer(1).value, &buffer(2).value}, gamma, cfg_.eps, cfg_.momentum};
    batch_statistics(x, s, ctx, run, sv, st);
    if (ctx.checkpointed) {
      CudaKept& k = im.kept.keep(ctx.slot);
      k.stats = Tensor::empty({kYScale, C}, DType::F64, x.device());
      k.stats.copy_from(sv.stats.slice0(0, kYScale));
      k.count = sv.count;
    }
  } else {
    cuda::bn_eval_stats_cuda(buffer(0).value.data<float>(), buffer(1).value.data<float>(), gamma, C, cfg_.eps,
                             row(sv.stats, kMean, C), row(sv.stats, kInvstd, C), row(sv.stats, kScale, C), st);
    sv.count = static_cast<double>(s.count());
  }
  if (next)  // fused: the neuron normalises as it reads x; backward works from x (no decision to read)
    return forward_fused(sv, x, s, param(1).value, next, ctx);
  return normalize_and_save(im, sv, x, s, gamma, beta, ctx, name_, st);
}

Tensor BatchNorm::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaSaved& sv = impl(cuda_impl_).slots.get(ctx.slot);
  bn_detail::check_backward(sv, dy, ctx);
  CudaAllocLabel label("batchnorm backward", &name_);
  const cpu::BnShape s = bn_shape(dy);
  const int64_t C = s.channels;
  const DType dt = dy.dtype();
  cudaStream_t st = cuda_layer::stream_of(dy);
  const double* center = row(sv.stats, sv.saved_output ? kYOffset : kMean, C);
  const double* unscale = sv.saved_output ? row(sv.stats, kYScale, C) : nullptr;
  const double* invstd = row(sv.stats, kInvstd, C);
  const double* scale = row(sv.stats, kScale, C);
  Tensor work = Tensor::empty({4, C}, DType::F64, dy.device());  // Σdy, Σdy·(act-center), b, d
  double* sum_dy = row(work, 0, C);
  double* sum_dy_xc = row(work, 1, C);
  cuda_layer::dispatch_activation(dt, "batchnorm", [&](auto t) {
    using T = decltype(t);
    cuda::bn_backward_moments_cuda<T>(static_cast<const T*>(dy.raw()), static_cast<const T*>(sv.act.raw()), s, center,
                                      sum_dy, sum_dy_xc, st);
  });
  // Local parameter gradients (the data-parallel reduction sums them later); divides
  // sum_dy_xc by unscale in place (it becomes Σ dy·(x - μ)).
  cuda::bn_backward_local_cuda(sum_dy, sum_dy_xc, unscale, invstd, C, row(sv.stats, kDGamma, C),
                               row(sv.stats, kDBeta, C), st);
  sv.has_param_grads = true;
  CudaImpl& im = impl(cuda_impl_);
  if (ctx.bn_grad_sums_for == this) {  // a piece of a split: its sums, nothing more
    CudaSplit& a = im.split_of(ctx.slot, C, dy.device());
    cuda::accumulate(a.grads.raw(), DType::F64, work.raw(), DType::F64, 2 * C, st);
    im.slots.release(ctx.slot);
    return Tensor();
  }
  if (sv.batch_stats && ctx.bn_split)  // the whole segment's sums (finished over the group)
    work.slice0(0, 2).copy_from(im.split.get(ctx.slot).grads);
  else if (sv.batch_stats && sv.synced)
    all_reduce_through_host(*ctx.bn_sync, work, 2 * C, nullptr);
  cuda::bn_backward_coefficients_cuda(sum_dy, sum_dy_xc, scale, invstd, unscale, sv.count, sv.batch_stats, C,
                                      row(work, 2, C), row(work, 3, C), st);
  Tensor dx = Tensor::empty(dy.shape(), dt, dy.device());  // [T, N, C, ...]
  cuda_layer::dispatch_activation(dt, "batchnorm", [&](auto t) {
    using T = decltype(t);
    cuda::bn_backward_input_cuda<T>(static_cast<const T*>(dy.raw()), static_cast<const T*>(sv.act.raw()), s, center,
                                    scale, row(work, 2, C), row(work, 3, C), static_cast<T*>(dx.raw()), st);
  });
  if (ctx.split_wgrad)
    sv.act = Tensor();  // W needs only dγ, dβ
  else
    backward_weight_cuda(ctx);
  return dx;
}

void BatchNorm::finish_split_moments_cuda(Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSplit& a = im.split.get(ctx.slot);
  const int64_t C = a.moments.dim(1);
  double count = a.count;
  if (ctx.bn_sync) all_reduce_through_host(*ctx.bn_sync, a.moments, 2 * C, &count);
  SM_CHECK(count > 0, "batchnorm over an empty batch");
  CudaKept& k = im.kept.keep(ctx.slot);
  k.stats = Tensor::empty({kYScale, C}, DType::F64, a.moments.device());
  k.count = count;
  cuda::bn_train_stats_cuda(row(a.moments, 0, C), row(a.moments, 1, C), count, C, cfg_.eps, cfg_.momentum,
                            buffer(0).value.data<float>(), buffer(1).value.data<float>(),
                            buffer(2).value.data<int64_t>(), param(0).value.data<float>(), row(k.stats, kMean, C),
                            row(k.stats, kInvstd, C), row(k.stats, kScale, C), cuda_layer::stream_of(a.moments));
}

void BatchNorm::finish_split_grad_sums_cuda(Ctx& ctx) {
  CudaSplit& a = impl(cuda_impl_).split.get(ctx.slot);
  if (ctx.bn_sync) all_reduce_through_host(*ctx.bn_sync, a.grads, 2 * a.grads.dim(1), nullptr);
}

void BatchNorm::drop_split_state_cuda(int slot) {
  if (!cuda_impl_) return;
  CudaImpl& im = impl(cuda_impl_);
  im.split.release(slot);
  im.kept.release(slot);
}

void BatchNorm::backward_weight_cuda(Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& sv = im.slots.get(ctx.slot);
  SM_CHECK(sv.has_param_grads, "batchnorm backward_weight before backward_input");
  const int64_t C = param(0).local_shape[0];  // num_features, or its tp channel shard
  cuda::bn_accumulate_param_grads_cuda(row(sv.stats, kDGamma, C), row(sv.stats, kDBeta, C), C,
                                       param(0).grad.data<float>(), param(1).grad.data<float>(),
                                       cuda_layer::stream_of(sv.stats));
  im.slots.release(ctx.slot);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
