// gpu_layer_profile.h — CUDA-event timing of every leaf layer's passes over ONE step
// (`bench --profile` on a GPU; the table is step_profile.h's).
//
//   gpu_profile_begin_step(dev)    arms the recorder, records the step's start event on the
//                                  device's compute stream
//   (the step runs eagerly: Layer's non-virtual entry points bracket each leaf's forward,
//    backward_input and backward_weight with an event pair on the compute stream)
//   gpu_profile_end_step(&ms)      disarms, records the end event, synchronises the stream
//                                  once and reads every pair's elapsed time
//
// Invariants: disarmed, the entry points pay one relaxed atomic load (gpu_profile_armed());
// events are created once per device and reused by later profiled steps (never destroyed);
// no time is read before the step's final synchronisation; a pair is only recorded outside
// stream capture (a graph-replayed step cannot be profiled: the caller runs it eagerly).
// Composites are not bracketed (their children are), so rows never count a time twice
// unless a leaf calls another leaf's entry point itself. A CPU-only build: begin_step is an
// internal error and armed() is always false. One thread records at a time.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/layers/step_profile.h"

namespace sm {

bool gpu_profile_armed();
void gpu_profile_begin_step(const Device& dev);
// Disarms and returns every pass timed since begin_step, in call order; *step_ms: the
// step's start-to-end time on the device.
std::vector<PassTiming> gpu_profile_end_step(double* step_ms);

// Used by Layer's entry points while armed: the start event of a pass (returns its index),
// then its end event.
size_t gpu_profile_pass_start(const Device& dev);
void gpu_profile_pass_end(size_t index, const std::string& layer, const std::string& type, ProfilePass pass);

}  // namespace sm
