// graph_step_cuda.h — `--cuda-graphs auto|on|off`: the steady-state training step on one GPU
// replayed as a CUDA graph (one launch for forward + loss + backward + clipping + the
// optimizer update) instead of hundreds of kernel launches, which dominate a small-batch step.
// The inventory of the step's host synchronisations and per-step host decisions, and what
// the graph covers, is the header comment of src/train/graph_step_cuda.cpp.
//
// Invariants:
//  * replay computes the eager trajectory bit for bit (the same kernels with the same
//    arguments on the same data); whatever could make a replay differ is either read from
//    device memory at run time (the dropout step and sample offset, the optimizer's lr and
//    step count), checked after every replay with an eager rerun of the step when it differs
//    (batch norm's saved-tensor choice; the captured update then writes nothing), or refuses
//    the capture (PLIF, a loss scale, labels on the host, ...);
//  * the rule of `auto` (cuda_graph_obstacle): one rank, a CUDA device, --distributed-mode
//    none, no fp16 loss scaling, no memopt. `on` where the rule fails, or where the capture
//    fails, is a one-line Input error; `auto` then runs eagerly after a one-line notice
//    naming the reason;
//  * gradient accumulation (M micro-batches per step): one micro-batch's forward + loss +
//    backward is captured once and replayed per micro-batch (its batch and sample offset
//    uploaded before each replay), the update after the last in a graph of its own; refused
//    while a layer keeps a per-micro-batch host decision (batch norm's guard);
//  * the first `warmup` steps run eagerly (allocator cache, cuDNN algorithm choices, cuBLAS
//    and kernel modules reach their steady state); a batch whose shape, dtype or spike flag
//    differs from the captured one (e.g. a short last batch) runs eagerly, as does every
//    step when graphs are off. CPU builds and CPU runs always run eagerly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/train/train_step.h"

namespace sm {

enum class CudaGraphMode { Auto, On, Off };

// "auto" | "on" | "off"; anything else is an Input error naming the flag.
CudaGraphMode parse_cuda_graphs(const std::string& value);
// The flag's value, and `on` with --device cpu (Input errors).
void validate_cuda_graphs_flag(const std::string& value, const std::string& device);

// What the auto rule looks at (known before the first step).
struct GraphConditions {
  bool cuda = false;                      // the run's device is a GPU
  int world_size = 1;                     // ranks of the job
  DistMode distributed_mode = DistMode::None;  // --distributed-mode
  int64_t microbatches = 1;               // per optimizer step on this rank (--grad-accum; no obstacle)
  bool loss_scaling = false;              // fp16 dynamic loss scaling
  bool memopt = false;                    // --memopt-level / --memory-budget-mb set
  bool soft_targets = false;              // --augment mixes samples (its loss is reduced on the host)
};

// "" when the step may be captured, else why not (a short phrase; a CPU-only build always
// answers "this build has no CUDA support").
std::string cuda_graph_obstacle(const GraphConditions& c);

// What decides whether the update (clipping and the optimizer step) joins the graph.
struct UpdateConditions {
  bool device_resident_step = false;  // Optimizer::supports_captured_update() (CUDA optimizers)
  bool norm_all_reduced = false;      // the layout's norm group is not null
  bool loss_scaling = false;          // fp16 dynamic loss scaling
};
// "" when the update is captured with the step, else why it runs eagerly after the replay.
std::string captured_update_obstacle(const UpdateConditions& c);

class CudaGraphStep {
 public:
  // `on` with an obstacle: Input error "--cuda-graphs on: <obstacle>".
  CudaGraphStep(CudaGraphMode mode, const GraphConditions& c, int warmup_steps = 2);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // train_step's contract (train_step.h). When replaying: reset_ms is the gradient zeroing,
  // forward_ms the graph (forward, loss, backward and, when captured, clipping and the
  // update, with the batch and scalar uploads and the read-back), backward_ms 0,
  // optimizer_ms 0 when the update is in the graph, else the eager optimizer phase.
  // A step whose clip norm differs from the captured one runs eagerly.
  StepResult step(Layout& layout, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                  const StepOptions& opts = {});

  bool enabled() const { return enabled_; }  // graphs are (still) meant to be used
  int64_t replays() const { return replays_; }
  int64_t eager_reruns() const { return reruns_; }  // replays undone (batch norm changed its choice)
  // Some replay ran clipping and the optimizer update inside the graph.
  bool update_in_graph() const { return update_replays_ > 0; }
  // "on", or "off (<reason>)".
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CudaGraphMode mode_;
  bool enabled_ = false;
  std::string reason_;
  int warmup_ = 2;
  int64_t eager_steps_ = 0, replays_ = 0, reruns_ = 0, update_replays_ = 0;
  void give_up(const std::string& why);  // auto: notice + eager; on: Input error
};

}  // namespace sm
