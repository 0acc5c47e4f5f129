// graph_capture_cuda.h — what layers must know while a training step is being captured into
// a CUDA graph (train/graph_step_cuda.h drives the capture). Needs no CUDA header.
//
// While a GraphCaptureScope is alive on a thread, active_graph_capture() returns its record
// and every kernel that thread enqueues on the compute stream is recorded, not run. Layers
// then must not read device values on the host (a synchronisation fails the capture), and
// every per-step value that a kernel takes as an argument is frozen into the graph. So:
//  * the loss keeps its loss / correct count on the device (`loss`, `correct`) instead of
//    reading them back; the driver reads them after each replay;
//  * dropout reads the step (its Philox sub-stream) from `step_on_device`, a device u32 the
//    driver writes before each replay, and the micro-batch's sample offset from
//    `sample_offset_on_device` (a device i64; the layer keeps its distance from
//    `sample_offset_base`), so one graph serves every micro-batch of a step;
//  * batch norm cannot ask the device whether its output may be kept (a host decision, read
//    back every eager forward): it repeats its last eager decision, records the device flag
//    and that decision in `guards` (the driver compares them after each replay) and the
//    running statistics it is about to update (`backups`: copies made inside the graph, so a
//    replay whose decision differs can be undone and the step rerun eagerly);
//  * a layer that cannot be captured calls refuse_graph_capture(why): it sets `refusal`
//    and throws; the driver ends the capture and reports `refusal` as the reason.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

struct GraphCapture {
  struct Guard {
    std::string layer;   // "batchnorm 'features.0.bn'"
    Tensor flag;         // device i32 [1], written by the graph
    int32_t expected = 0;  // the decision frozen into the graph (0/1)
  };
  const void* step_on_device = nullptr;  // device u32: low 32 bits of ctx.step at replay
  // device i64: the replayed micro-batch's sample offset (null: the captured one is kept);
  // sample_offset_base is the offset of the micro-batch captured.
  const void* sample_offset_on_device = nullptr;
  int64_t sample_offset_base = 0;
  Tensor loss;                           // device f64 [>= 1]: [0] is the loss
  Tensor correct;                        // device i64 [1]
  std::vector<Guard> guards;
  std::vector<std::pair<Tensor, Tensor>> backups;  // (live buffer, copy taken before its update)
  std::string refusal;                             // why this step cannot be captured ("" = none)
};

// The capture record of this thread, or nullptr when no capture is in progress.
GraphCapture* active_graph_capture();

// Makes `g` this thread's capture record for the scope (not nestable).
class GraphCaptureScope {
 public:
  explicit GraphCaptureScope(GraphCapture* g);
  ~GraphCaptureScope();
  GraphCaptureScope(const GraphCaptureScope&) = delete;
  GraphCaptureScope& operator=(const GraphCaptureScope&) = delete;
};

// Records `why` as the capture's refusal (the first one wins) and throws sm::Error(Input).
[[noreturn]] void refuse_graph_capture(const std::string& why);

}  // namespace sm
