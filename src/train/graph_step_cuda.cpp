// graph_step_cuda.cpp — the CUDA-graph training step (train/graph_step_cuda.h).
//
// Inventory: the single-GPU steady-state step (trainer.cpp / cmd_bench.cpp -> train_step)
// and every point where the host waits for the device (S) or decides on a per-step value (D):
//   batch    to_device: x, y copied from pinned memory on the compute stream (async; a
//            pageable source would be synchronous: S), x cast on the device if needed.
//   zero     layout.begin_step(): gradients zeroed on the device (async).
//   forward  neuron layers: r = 1/tau (LIF: constant); PLIF reads w on the host (S, D);
//            batch norm fused into the neuron that follows it (layers/fused_epilogue.h,
//            the default) keeps its input and reads nothing back; an unfused batch norm
//            reads back "may the output be saved instead of the input" (S, D: decides which
//            tensor backward reads), one per unfused BN layer;
//            dropout: the mask's Philox sub-stream is the step (D: kernel argument);
//            loss: labels copied to the host and range-checked (S), the loss and correct
//            count read back (S).
//   backward the loss gradient scale (D: 1/M, times the fp16 loss scale); the layout waits
//            for the device after backward to time the phase (S, timing only).
//   update   fp16: unscale and check for non-finite gradients (S, D: skip the update);
//            clipping: the global norm read back (S, D: the clip factor stays on the
//            device, the norm is reported); the optimizer: ONE multi-tensor launch for every
//            parameter (optim/optimizer_cuda.h), its lr and Adam's bias corrections of step t
//            written to a device struct before the launch (D, read from device memory); the
//            step waits for the device to time the update (S, timing only).
//   after    trainer: firing rates, one copy of the device's pooled neuron counters per
//            report (S once, not once per neuron layer; src/layers/firing_counters_cuda.h); metrics.
// What the graph does about them (one rank, no loss scaling, no memopt — the auto rule):
//   * captured: zero-free forward + loss + backward of one micro-batch from static x / y
//     buffers (the batch is copied into them before each replay: device to device, async),
//     replayed once per micro-batch of the step (--grad-accum: the gradients accumulate as
//     in the eager loop; the loss scale 1/M is fixed at capture; losses and counts are read
//     back per micro-batch into pinned slots and summed in train_step's order);
//   * dropout's step and the micro-batch's sample offset: read by the kernel from device
//     words written before each replay;
//   * batch norm: repeats its last eager decision without the read-back; the device flags
//     are read with the loss after each replay (one synchronisation for the whole step
//     instead of one per BN layer + one for the loss + one timing wait); a differing flag
//     restores the running statistics (backed up inside the graph) and reruns the step
//     eagerly, then the step is captured again after one eager step (bit-identical);
//   * PLIF (w on the host), labels on the host, an empty batch, or any call that cannot be
//     captured (a synchronisation, a host copy: cudaErrorStreamCapture*) refuse the capture;
//   * the update (captured_update_obstacle() == ""): the global norm's sum of squares and
//     the clip scaling (optim/optimizer_cuda.h DeviceGradClip: four launches, bitwise
//     clip_grad_norm_cuda) and the optimizer's multi-tensor update (Optimizer::enqueue_update)
//     follow backward inside the graph. Before each replay the optimizer's stage_step()
//     writes this step's lr and bias corrections to device memory (one small launch), so a
//     schedule changes nothing in the graph; the clip norm is fixed at capture (a step with
//     another one runs eagerly); the sum of squares is read back with the loss (the reported
//     norm). Batch norm's guards are compared on the device inside the graph: when one
//     differs the update writes nothing (the step's result is discarded, the step count is
//     taken back, the step reruns eagerly). So a replayed step is the batch copy, the scalar
//     upload, ONE graph launch and one synchronisation for the loss, norm and guards;
//   * the update stays eager after the replay (today's optimizer_phase) when the optimizer
//     has no device-resident step (CPU parameters) or the norm is all-reduced over a group;
//   * memory: the graph replays its captured addresses, so its blocks are kept apart in
//     the caching allocator (core/allocator_cuda.h graph pool) for as long as it lives.
#include "spikemesh/train/graph_step_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/optim/optimizer_cuda.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/graph_capture_cuda.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/kernels/cuda/optim_multi.h"
#endif

namespace sm {

CudaGraphMode parse_cuda_graphs(const std::string& v) {
  if (v == "auto") return CudaGraphMode::Auto;
  if (v == "on") return CudaGraphMode::On;
  if (v == "off") return CudaGraphMode::Off;
  SM_INPUT_ERROR("--cuda-graphs must be auto, on or off, got '" << v << "'");
}

void validate_cuda_graphs_flag(const std::string& value, const std::string& device) {
  if (parse_cuda_graphs(value) == CudaGraphMode::On && device == "cpu")
    SM_INPUT_ERROR("--cuda-graphs on needs a GPU, but --device is cpu");
}

std::string cuda_graph_obstacle(const GraphConditions& c) {
#ifndef SPIKEMESH_HAVE_CUDA
  (void)c;
  return "this build has no CUDA support";
#else
  if (!c.cuda) return "the run is on the CPU";
  if (c.world_size > 1)
    return std::to_string(c.world_size) + " ranks (communication between ranks is not captured)";
  if (c.distributed_mode != DistMode::None) return std::string("--distributed-mode ") + dist_mode_name(c.distributed_mode);
  if (c.loss_scaling) return "fp16 dynamic loss scaling (a host decision every step)";
  if (c.memopt) return "memopt (checkpointed segments drop and recompute their state: not captured)";
  if (c.soft_targets) return "--augment mixup/cutmix (the soft-target loss is reduced on the host)";
  return "";
#endif
}

std::string captured_update_obstacle(const UpdateConditions& c) {
  if (!c.device_resident_step) return "the optimizer reads its step on the host";
  if (c.norm_all_reduced) return "the gradient norm is all-reduced over ranks";
  if (c.loss_scaling) return "fp16 loss scaling decides on the host whether to update";
  return "";
}

namespace {
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
}  // namespace

#ifdef SPIKEMESH_HAVE_CUDA

struct CudaGraphStep::Impl {
  Device dev = Device::cpu();
  cudaGraphExec_t exec = nullptr;
  std::unique_ptr<GraphCapture> rec;  // holds the graph's loss, flags and backups alive
  Tensor x, y;                        // static batch buffers (device)
  Tensor step_word;                   // device i32 [1]: the step's low 32 bits (as u32)
  Tensor offset_word;                 // device i64 [1]: the replayed micro-batch's sample offset
  Tensor host_step, host_offsets, host_loss, host_correct, host_flags, host_sum_sq;  // pinned
  int64_t micro_count = 1;            // micro-batches per step (one replay of `exec` each)
  cudaGraphExec_t update_exec = nullptr;  // micro_count > 1 and with_update: clipping + update
  bool with_update = false;              // clipping and the optimizer update are in the graph
  double clip_norm = 0.0;                // the clip norm captured (with_update; 0: none)
  std::unique_ptr<DeviceGradClip> clip;  // with_update and clip_norm > 0
  Tensor skip_word;                      // device i32 [1]: 1 when a guard differs (no update)

  bool matches(const std::vector<MicroBatch>& micro) const {
    if (!x.defined() || static_cast<int64_t>(micro.size()) != micro_count) return false;
    for (const MicroBatch& mb : micro)
      if (!(mb.x.shape() == x.shape() && mb.x.dtype() == x.dtype() && mb.x.device() == x.device() &&
            mb.x.is_binary() == x.is_binary() && mb.y.shape() == y.shape() && mb.y.dtype() == y.dtype() &&
            mb.y.device() == y.device()))
        return false;
    return true;
  }

  // Destroys the graph and gives its memory back to the general cache.
  void destroy() noexcept {
    if (dev.is_cpu()) return;
    cuda::DeviceGuard guard(dev.ordinal);
    (void)cudaStreamSynchronize(cuda::stream_for(dev.ordinal));  // no replay in flight
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (update_exec) (void)cudaGraphExecDestroy(update_exec);
    exec = update_exec = nullptr;
    rec.reset();
    x = y = step_word = offset_word = skip_word = Tensor();
    clip.reset();
    with_update = false;
    cuda_allocator(dev.ordinal).release_graph_pool();
  }

  // Inside the capture, after backward: the guards compared on the device (skip_word),
  // clipping, the optimizer's update (writes nothing when skip_word is set).
  void enqueue_update(Optimizer& opt, cudaStream_t st) {
    std::vector<cuda::ExpectedFlag> flags;
    for (const GraphCapture::Guard& g : rec->guards) flags.push_back({g.flag.data<int32_t>(), g.expected});
    cuda::flags_mismatch_cuda(flags.data(), static_cast<int64_t>(flags.size()), skip_word.data<int32_t>(), st);
    if (clip) clip->enqueue();
    opt.enqueue_update(skip_word.data<int32_t>());
  }

  // Ends the capture begun on `st`: instantiates into *out; "" or the reason it failed.
  static std::string end_capture(cudaStream_t st, std::string why, cudaGraphExec_t* out) {
    cudaGraph_t graph = nullptr;
    cudaError_t rc = cudaStreamEndCapture(st, &graph);
    if (why.empty() && rc != cudaSuccess) why = std::string("the capture failed: ") + cudaGetErrorString(rc);
    if (why.empty()) {
      rc = cudaGraphInstantiate(out, graph, 0);
      if (rc != cudaSuccess) why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(rc);
    }
    if (graph) (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    return why;
  }

  // Captures clipping and the update alone (several micro-batches: after the last replay).
  std::string capture_update(Optimizer& opt, cudaStream_t st) {
    cudaError_t rc = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
    if (rc != cudaSuccess) return std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(rc);
    std::string why;
    try {
      enqueue_update(opt, st);
    } catch (const std::exception& e) {
      why = first_line(e.what());
    }
    return end_capture(st, why, &update_exec);
  }

  // Captures forward + loss + backward of one micro-batch of `micro`'s shape (replayed once
  // per micro-batch), and the update when `update`; "" on success, else the reason.
  std::string capture(Layout& layout, Optimizer& opt, const std::vector<MicroBatch>& micro, const Ctx& ctx,
                      bool update, double max_norm) {
    const MicroBatch& mb = micro[0];
    micro_count = static_cast<int64_t>(micro.size());
    dev = mb.x.device();
    cuda::DeviceGuard guard(dev.ordinal);
    cudaStream_t st = cuda::stream_for(dev.ordinal);
    x = Tensor::empty(mb.x.shape(), mb.x.dtype(), dev).set_binary(mb.x.is_binary());
    y = Tensor::empty(mb.y.shape(), mb.y.dtype(), dev);
    step_word = Tensor::empty({1}, DType::I32, dev);
    offset_word = Tensor::zeros({1}, DType::I64, dev);
    if (!host_step.defined()) host_step = Tensor::empty_pinned({1}, DType::I32);
    host_offsets = Tensor::empty_pinned({micro_count}, DType::I64);
    host_loss = Tensor::empty_pinned({micro_count}, DType::F64);
    host_correct = Tensor::empty_pinned({micro_count}, DType::I64);
    with_update = update;
    clip_norm = update ? max_norm : 0.0;
    if (with_update) {
      skip_word = Tensor::zeros({1}, DType::I32, dev);
      if (!host_sum_sq.defined()) host_sum_sq = Tensor::empty_pinned({1}, DType::F64);
      try {
        if (clip_norm > 0)
          clip = std::make_unique<DeviceGradClip>(layout.optimizer_params(), layout.norm_params(), clip_norm);
      } catch (const std::exception& e) {
        const std::string why = first_line(e.what());
        destroy();
        return why;
      }
    }
    SM_CUDA_CHECK(cudaStreamSynchronize(st));
    rec = std::make_unique<GraphCapture>();
    rec->step_on_device = step_word.raw();
    rec->sample_offset_on_device = offset_word.raw();
    rec->sample_offset_base = mb.sample_offset;
    CudaCachingAllocator& mem = cuda_allocator(dev.ordinal);
    mem.begin_graph_capture();
    std::string why;
    // Relaxed: other threads (the prefetcher pinning memory) are not restricted.
    cudaError_t rc = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
    if (rc != cudaSuccess) {
      why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(rc);
    } else {
      {
        GraphCaptureScope scope(rec.get());
        try {
          Ctx c = ctx;
          std::vector<MicroBatch> one{MicroBatch{x, y, mb.sample_offset, Tensor()}};
          // train_step's loss gradient scale 1/M (no loss scaling)
          layout.run_microbatches(one, c, 1.0 / static_cast<double>(micro_count));
          if (with_update && micro_count == 1) enqueue_update(opt, st);
        } catch (const std::exception& e) {
          why = rec->refusal.empty() ? first_line(e.what()) : rec->refusal;
        }
      }
      why = end_capture(st, why, &exec);
      if (why.empty() && !rec->loss.defined()) why = "the loss was not captured on the device";
      if (why.empty() && micro_count > 1 && !rec->guards.empty())
        why = rec->guards[0].layer + " decides on the host which tensor it saves, per micro-batch (--grad-accum)";
      if (why.empty() && micro_count > 1 && with_update) why = capture_update(opt, st);
    }
    (void)cudaGetLastError();  // a capture error is not sticky; clear it
    mem.end_graph_capture();
    if (!why.empty()) {
      destroy();
      return why;
    }
    host_flags = Tensor::empty_pinned({static_cast<int64_t>(std::max<size_t>(1, rec->guards.size()))}, DType::I32);
    return "";
  }

  // Uploads the step (and the optimizer's scalars); per micro-batch uploads the batch and its
  // sample offset and replays; then the update graph (several micro-batches); reads losses,
  // counts, the norm and the guards back (one wait). Returns the first guard whose decision
  // differs ("" when none).
  std::string replay(const std::vector<MicroBatch>& micro, int64_t step, Optimizer& opt, StepResult& r) {
    cuda::DeviceGuard guard(dev.ordinal);
    cudaStream_t st = cuda::stream_for(dev.ordinal);
    const Stream s = compute_stream(dev);
    host_step.data<int32_t>()[0] = static_cast<int32_t>(static_cast<uint32_t>(step));  // the u32 bits
    step_word.copy_from(host_step, s);  // async; host_step is reused only after the wait below
    if (with_update) opt.stage_step();  // this step's lr and bias corrections, in stream order
    for (int64_t m = 0; m < micro_count; ++m) {
      const MicroBatch& mb = micro[static_cast<size_t>(m)];
      x.copy_from(mb.x, s);  // device to device on the compute stream
      y.copy_from(mb.y, s);
      int64_t* offset = host_offsets.data<int64_t>() + m;  // a slot per micro-batch: reused after the wait
      *offset = mb.sample_offset;
      SM_CUDA_CHECK(cudaMemcpyAsync(offset_word.raw(), offset, sizeof(int64_t), cudaMemcpyHostToDevice, st));
      SM_CUDA_CHECK(cudaGraphLaunch(exec, st));
      SM_CUDA_CHECK(cudaMemcpyAsync(host_loss.data<double>() + m, rec->loss.raw(), sizeof(double),
                                    cudaMemcpyDeviceToHost, st));
      SM_CUDA_CHECK(cudaMemcpyAsync(host_correct.data<int64_t>() + m, rec->correct.raw(), sizeof(int64_t),
                                    cudaMemcpyDeviceToHost, st));
    }
    if (update_exec) SM_CUDA_CHECK(cudaGraphLaunch(update_exec, st));
    if (clip)
      SM_CUDA_CHECK(
          cudaMemcpyAsync(host_sum_sq.raw(), clip->sum_sq().raw(), sizeof(double), cudaMemcpyDeviceToHost, st));
    for (size_t i = 0; i < rec->guards.size(); ++i)  // guards: one micro-batch only
      SM_CUDA_CHECK(cudaMemcpyAsync(host_flags.data<int32_t>() + i, rec->guards[i].flag.raw(), sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, st));
    SM_CUDA_CHECK(cudaStreamSynchronize(st));
    double loss_sum = 0;  // train_step's order
    for (int64_t m = 0; m < micro_count; ++m) {
      loss_sum += host_loss.data<double>()[m];
      r.correct += host_correct.data<int64_t>()[m];
      r.count += micro[static_cast<size_t>(m)].x.dim(1);
    }
    r.loss = loss_sum / static_cast<double>(micro_count);
    if (clip) r.grad_norm = std::sqrt(host_sum_sq.data<double>()[0]);
    for (size_t i = 0; i < rec->guards.size(); ++i)
      if ((host_flags.data<int32_t>()[i] != 0 ? 1 : 0) != rec->guards[i].expected) return rec->guards[i].layer;
    return "";
  }

  // Undoes what a replay changed outside the step's own scratch: the running statistics and
  // the optimizer's step count (its update wrote nothing: the guards differed on the device).
  void undo(Optimizer& opt) {
    for (auto& [live, backup] : rec->backups) live.copy_from(backup);
    if (with_update) opt.set_step_count(opt.step_count() - 1);
    synchronize(dev);
  }
};

#else  // !SPIKEMESH_HAVE_CUDA

struct CudaGraphStep::Impl {
  void destroy() noexcept {}
};

#endif  // SPIKEMESH_HAVE_CUDA

CudaGraphStep::CudaGraphStep(CudaGraphMode mode, const GraphConditions& c, int warmup_steps)
    : impl_(std::make_unique<Impl>()), mode_(mode), warmup_(std::max(1, warmup_steps)) {
  if (mode == CudaGraphMode::Off) {
    reason_ = "--cuda-graphs off";
    return;
  }
  const std::string obstacle = cuda_graph_obstacle(c);
  if (!obstacle.empty()) {
    if (mode == CudaGraphMode::On) SM_INPUT_ERROR("--cuda-graphs on: " << obstacle);
    reason_ = obstacle;  // auto: eager, silently (the rule says so)
    return;
  }
  enabled_ = true;
}

CudaGraphStep::~CudaGraphStep() { impl_->destroy(); }

std::string CudaGraphStep::describe() const {
  if (enabled_) return "on";
  return "off (" + reason_ + ")";
}

void CudaGraphStep::give_up(const std::string& why) {
  enabled_ = false;
  reason_ = why;
  if (mode_ == CudaGraphMode::On) SM_INPUT_ERROR("--cuda-graphs on: the step cannot be captured: " << why);
  log_message(LogLevel::Warn, "cuda graphs off: " + why + "; the step runs eagerly");
}

StepResult CudaGraphStep::step(Layout& layout, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                               const StepOptions& o) {
#ifndef SPIKEMESH_HAVE_CUDA
  return train_step(layout, opt, micro, ctx, o);
#else
  if (!enabled_ || micro.empty() || (o.scaler && o.scaler->enabled()) || !micro[0].x.device().is_cuda())
    return train_step(layout, opt, micro, ctx, o);
  const bool update = captured_update_obstacle(UpdateConditions{opt.supports_captured_update(),
                                                                layout.norm_group() != nullptr, false})
                          .empty();
  if (impl_->exec && (!impl_->matches(micro) || (impl_->with_update && !update) ||
                      (impl_->with_update && impl_->clip_norm != std::max(0.0, o.clip_norm))))
    return train_step(layout, opt, micro, ctx, o);  // e.g. a short batch, another clip norm
  if (eager_steps_ < warmup_) {
    ++eager_steps_;
    return train_step(layout, opt, micro, ctx, o);
  }
  if (!impl_->exec) {
    std::string why = impl_->capture(layout, opt, micro, ctx, update, std::max(0.0, o.clip_norm));
    if (!why.empty() && update) {  // the step without its update may still be captured
      const std::string without = impl_->capture(layout, opt, micro, ctx, false, 0.0);
      if (without.empty())
        log_message(LogLevel::Warn, "cuda graphs: the update runs eagerly after each replay: " + why);
      why = without;
    }
    if (!why.empty()) {
      give_up(why);  // on: throws
      return train_step(layout, opt, micro, ctx, o);  // nothing ran on the device: the eager step
    }
  }
  StepResult r;
  Timer t;
  layout.begin_step();  // zero the gradients (eager, before the replay)
  r.reset_ms = t.ms();
  t.reset();
  const std::string differs = impl_->replay(micro, ctx.step, opt, r);
  r.forward_ms = t.ms();
  if (!differs.empty()) {  // undo the replay, run the step eagerly, capture again later
    impl_->undo(opt);
    impl_->destroy();
    ++reruns_;
    eager_steps_ = warmup_ - 1;  // one eager step records the new decision
    log_message(LogLevel::Info, "cuda graphs: " + differs +
                                    " changed which tensor it saves for backward; the step reruns eagerly and is "
                                    "captured again");
    return train_step(layout, opt, micro, ctx, o);
  }
  ++replays_;
  if (impl_->with_update) {
    ++update_replays_;
    layout.after_optimizer_step();  // one rank: nothing to gather
  } else {
    optimizer_phase(layout, opt, o, r);
  }
  return r;
#endif
}

}  // namespace sm
