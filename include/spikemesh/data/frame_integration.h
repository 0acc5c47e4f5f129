// frame_integration.h — event streams to frames, exactly as SpikingJelly 2.0 integrates them
// (spikingjelly.datasets: integrate_events_by_fixed_frames_number, cal_fixed_frames_number_
// segment_index, integrate_events_by_fixed_duration), and the resize SpikingJelly's CIFAR10-DVS
// 48x48 recipe applies (torchvision Resize = bilinear, align_corners=False, antialias=True).
// Frames are [T, 2, H, W] event counts, channel 0 = events with p == 0, pixel [y][x].
// Invariants: counts are exact in f32 (< 2^24 events per pixel); events are taken in stream
// order (a segment is an index range); no event is dropped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/data/event_formats.h"

namespace sm {

enum class SplitBy { Number, Time, Duration };
const char* split_by_name(SplitBy s);
SplitBy split_by_from_name(const std::string& s);  // "number" | "time"; Input error otherwise

struct FrameSpec {
  int T = 10;                 // frames stored per sample
  SplitBy split_by = SplitBy::Number;
  int64_t duration_us = 0;    // SplitBy::Duration: the width of each frame
  int height = 128, width = 128;  // the sensor
};

// Integrates events [begin, end) of `ev` into `out` (f32 [T, 2, H, W], overwritten).
//  * Number: frame i = events [i*(n/T), (i+1)*(n/T)), the last frame also takes the n % T rest.
//  * Time: dt = (t_last - t_first) / T in the stream's integer type; frame i = the index range
//    from the first to the last event with t in [t_first + i*dt, t_first + (i+1)*dt); the last
//    frame ends at the last event. Input error (naming `what` and the frame) for an empty bin,
//    as SpikingJelly fails there.
//  * Duration: SpikingJelly 2.0's grid: t -= min t; ceil(t_last / D) frames of [k*D, (k+1)*D),
//    the last taking the rest; the first T are stored (zeros after a shorter sample).
// Returns the number of frames the sample really has (T for Number/Time; the grid's for Duration).
int64_t integrate_frames(const EventStream& ev, int64_t begin, int64_t end, const FrameSpec& spec, float* out,
                         const std::string& what);

// integrate_frames of events [begin, end), then, when out_h x out_w differs from the sensor,
// resize_bilinear_aa: what the importer stores and --frames makes. Returns the frames (in
// `scratch`, valid until its next use; T x 2 x out_h x out_w values) and the frame count in
// `n_frames` (integrate_frames' return).
struct FrameScratch {
  std::vector<float> frames, resized;
};
const float* integrate_and_resize(const EventStream& ev, int64_t begin, int64_t end, const FrameSpec& spec, int out_h,
                                  int out_w, FrameScratch& scratch, const std::string& what, int64_t* n_frames = nullptr);

// Bilinear anti-aliased resize of `planes` planes [h, w] -> [out_h, out_w] (f32), as
// torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=True) on the
// CPU: separable, the width pass first, triangle weights normalised per output pixel.
void resize_bilinear_aa(const float* in, int64_t planes, int h, int w, int out_h, int out_w, float* out);

}  // namespace sm
