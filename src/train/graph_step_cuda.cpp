// graph_step_cuda.cpp — the CUDA-graph training step (train/graph_step_cuda.h).
//
// Inventory: the single-GPU steady-state step (trainer.cpp / cmd_bench.cpp -> train_step)
// and every point where the host waits for the device (S) or decides on a per-step value (D):
//   batch    to_device: x, y copied from pinned memory on the compute stream (async; a
//            pageable source would be synchronous: S), x cast on the device if needed.
//   zero     layout.begin_step(): gradients zeroed on the device (async).
//   forward  neuron layers: r = 1/tau (LIF: constant); PLIF reads w on the host (S, D);
//            batch norm reads back "may the output be saved instead of the input" (S, D:
//            decides which tensor backward reads), one per BN layer;
//            dropout: the mask's Philox sub-stream is the step (D: kernel argument);
//            loss: labels copied to the host and range-checked (S), the loss and correct
//            count read back (S).
//   backward the loss gradient scale (D: 1/M, times the fp16 loss scale); the layout waits
//            for the device after backward to time the phase (S, timing only).
//   update   fp16: unscale and check for non-finite gradients (S, D: skip the update);
//            clipping: the global norm read back (S, D: the clip factor stays on the
//            device, the norm is reported); the optimizer: one launch per parameter with lr
//            and, for Adam, the bias corrections of step t as arguments (D); the step waits
//            for the device to time the update (S, timing only).
//   after    trainer: firing rates read per neuron layer (S each, after the step); metrics.
// What the graph does about them (one rank, one micro-batch, no loss scaling — the auto rule):
//   * captured: zero-free forward + loss + backward of the micro-batch from static x / y
//     buffers (the batch is copied into them before each replay: device to device, async);
//   * dropout's step: read by the kernel from a device word written before each replay;
//   * batch norm: repeats its last eager decision without the read-back; the device flags
//     are read with the loss after each replay (one synchronisation for the whole step
//     instead of one per BN layer + one for the loss + one timing wait); a differing flag
//     restores the running statistics (backed up inside the graph) and reruns the step
//     eagerly, then the step is captured again after one eager step (bit-identical);
//   * PLIF (w on the host), labels on the host, an empty batch, or any call that cannot be
//     captured (a synchronisation, a host copy: cudaErrorStreamCapture*) refuse the capture;
//   * NOT captured: the optimizer phase (train_step.h optimizer_phase) runs eagerly after
//     the replay: lr, Adam's bias corrections and the clip norm are host values per step,
//     and capturing them would need device-resident hyper-parameters in every update
//     kernel. It is one launch per parameter tensor (tens for the models here), against
//     hundreds of launches in forward + backward. Its final timing wait stays.
//   * memory: the graph replays its captured addresses, so its blocks are kept apart in
//     the caching allocator (core/allocator_cuda.h graph pool) for as long as it lives.
#include "spikemesh/train/graph_step_cuda.h"

#include <algorithm>
#include <cstdio>

#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/core/timer.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/graph_capture_cuda.h"
#include "spikemesh/core/stream_cuda.h"
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
  if (c.microbatches != 1) return std::to_string(c.microbatches) + " micro-batches per step (--grad-accum)";
  if (c.loss_scaling) return "fp16 dynamic loss scaling (a host decision every step)";
  if (c.memopt) return "memopt (checkpointed segments drop and recompute their state: not captured)";
  return "";
#endif
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
  Tensor host_step, host_loss, host_correct, host_flags;  // pinned
  int64_t sample_offset = 0;

  bool matches(const MicroBatch& mb) const {
    return x.defined() && mb.x.shape() == x.shape() && mb.x.dtype() == x.dtype() && mb.x.device() == x.device() &&
           mb.x.is_binary() == x.is_binary() && mb.y.shape() == y.shape() && mb.y.dtype() == y.dtype() &&
           mb.y.device() == y.device() && mb.sample_offset == sample_offset;
  }

  // Destroys the graph and gives its memory back to the general cache.
  void destroy() noexcept {
    if (dev.is_cpu()) return;
    cuda::DeviceGuard guard(dev.ordinal);
    (void)cudaStreamSynchronize(cuda::stream_for(dev.ordinal));  // no replay in flight
    if (exec) (void)cudaGraphExecDestroy(exec);
    exec = nullptr;
    rec.reset();
    x = y = step_word = Tensor();
    cuda_allocator(dev.ordinal).release_graph_pool();
  }

  // Captures forward + loss + backward of `mb`'s shape; "" on success, else the reason.
  std::string capture(Layout& layout, const MicroBatch& mb, const Ctx& ctx) {
    dev = mb.x.device();
    cuda::DeviceGuard guard(dev.ordinal);
    cudaStream_t st = cuda::stream_for(dev.ordinal);
    x = Tensor::empty(mb.x.shape(), mb.x.dtype(), dev).set_binary(mb.x.is_binary());
    y = Tensor::empty(mb.y.shape(), mb.y.dtype(), dev);
    step_word = Tensor::empty({1}, DType::I32, dev);
    sample_offset = mb.sample_offset;
    if (!host_step.defined()) {
      host_step = Tensor::empty_pinned({1}, DType::I32);
      host_loss = Tensor::empty_pinned({1}, DType::F64);
      host_correct = Tensor::empty_pinned({1}, DType::I64);
    }
    SM_CUDA_CHECK(cudaStreamSynchronize(st));
    rec = std::make_unique<GraphCapture>();
    rec->step_on_device = step_word.raw();
    CudaCachingAllocator& mem = cuda_allocator(dev.ordinal);
    mem.begin_graph_capture();
    std::string why;
    cudaGraph_t graph = nullptr;
    // Relaxed: other threads (the prefetcher pinning memory) are not restricted.
    cudaError_t rc = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
    if (rc != cudaSuccess) {
      why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(rc);
    } else {
      {
        GraphCaptureScope scope(rec.get());
        try {
          Ctx c = ctx;
          std::vector<MicroBatch> one{MicroBatch{x, y, sample_offset}};
          layout.run_microbatches(one, c, 1.0);  // one micro-batch, no loss scale: train_step's 1/M
        } catch (const std::exception& e) {
          why = rec->refusal.empty() ? first_line(e.what()) : rec->refusal;
        }
      }
      rc = cudaStreamEndCapture(st, &graph);
      if (why.empty() && rc != cudaSuccess) why = std::string("the capture failed: ") + cudaGetErrorString(rc);
      if (why.empty() && !rec->loss.defined()) why = "the loss was not captured on the device";
      if (why.empty()) {
        rc = cudaGraphInstantiate(&exec, graph, 0);
        if (rc != cudaSuccess) why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(rc);
      }
      if (graph) (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    }
    (void)cudaGetLastError();  // a capture error is not sticky; clear it
    mem.end_graph_capture();
    if (!why.empty()) {
      exec = nullptr;
      destroy();
      return why;
    }
    host_flags = Tensor::empty_pinned({static_cast<int64_t>(std::max<size_t>(1, rec->guards.size()))}, DType::I32);
    return "";
  }

  // Uploads the batch and the step, replays, reads loss, count and guards back (one wait).
  // Returns the first guard whose decision differs ("" when none).
  std::string replay(const MicroBatch& mb, int64_t step, StepResult& r) {
    cuda::DeviceGuard guard(dev.ordinal);
    cudaStream_t st = cuda::stream_for(dev.ordinal);
    const Stream s = compute_stream(dev);
    x.copy_from(mb.x, s);  // device to device on the compute stream
    y.copy_from(mb.y, s);
    host_step.data<int32_t>()[0] = static_cast<int32_t>(static_cast<uint32_t>(step));  // the u32 bits
    step_word.copy_from(host_step, s);  // async; host_step is reused only after the wait below
    SM_CUDA_CHECK(cudaGraphLaunch(exec, st));
    SM_CUDA_CHECK(cudaMemcpyAsync(host_loss.raw(), rec->loss.raw(), sizeof(double), cudaMemcpyDeviceToHost, st));
    SM_CUDA_CHECK(
        cudaMemcpyAsync(host_correct.raw(), rec->correct.raw(), sizeof(int64_t), cudaMemcpyDeviceToHost, st));
    for (size_t i = 0; i < rec->guards.size(); ++i)
      SM_CUDA_CHECK(cudaMemcpyAsync(host_flags.data<int32_t>() + i, rec->guards[i].flag.raw(), sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, st));
    SM_CUDA_CHECK(cudaStreamSynchronize(st));
    r.loss = host_loss.data<double>()[0];
    r.correct = host_correct.data<int64_t>()[0];
    r.count = mb.x.dim(1);
    for (size_t i = 0; i < rec->guards.size(); ++i)
      if ((host_flags.data<int32_t>()[i] != 0 ? 1 : 0) != rec->guards[i].expected) return rec->guards[i].layer;
    return "";
  }

  // Undoes what a replay changed outside the step's own scratch: the running statistics.
  void undo() {
    for (auto& [live, backup] : rec->backups) live.copy_from(backup);
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
  if (!enabled_ || micro.size() != 1 || (o.scaler && o.scaler->enabled()) || !micro[0].x.device().is_cuda())
    return train_step(layout, opt, micro, ctx, o);
  const MicroBatch& mb = micro[0];
  if (impl_->exec && !impl_->matches(mb)) return train_step(layout, opt, micro, ctx, o);  // e.g. a short batch
  if (eager_steps_ < warmup_) {
    ++eager_steps_;
    return train_step(layout, opt, micro, ctx, o);
  }
  if (!impl_->exec) {
    const std::string why = impl_->capture(layout, mb, ctx);
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
  const std::string differs = impl_->replay(mb, ctx.step, r);
  r.forward_ms = t.ms();
  if (!differs.empty()) {  // undo the replay, run the step eagerly, capture again later
    impl_->undo();
    impl_->destroy();
    ++reruns_;
    eager_steps_ = warmup_ - 1;  // one eager step records the new decision
    log_message(LogLevel::Info, "cuda graphs: " + differs +
                                    " changed which tensor it saves for backward; the step reruns eagerly and is "
                                    "captured again");
    return train_step(layout, opt, micro, ctx, o);
  }
  ++replays_;
  optimizer_phase(layout, opt, o, r);
  return r;
#endif
}

}  // namespace sm
