// frame_integration.cpp — SpikingJelly's segment index arithmetic, per-segment bincount and
// torch's anti-aliased bilinear resampling (aten UpSampleKernel, interp_size 2).
#include "spikemesh/data/frame_integration.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "spikemesh/core/error.h"

namespace sm {

const char* split_by_name(SplitBy s) {
  return s == SplitBy::Number ? "number" : s == SplitBy::Time ? "time" : "duration";
}

SplitBy split_by_from_name(const std::string& s) {
  if (s == "number") return SplitBy::Number;
  if (s == "time") return SplitBy::Time;
  SM_INPUT_ERROR("--split-by " << s << ": expected number or time (or give --duration-us for fixed-duration frames)");
}

namespace {
// Adds events [l, r) into frame f ([2, H, W]).
void add_segment(const EventStream& ev, int64_t l, int64_t r, int h, int w, float* f) {
  const int64_t plane = static_cast<int64_t>(h) * w;
  for (int64_t i = l; i < r; ++i) f[(ev.p[i] ? plane : 0) + int64_t(ev.y[i]) * w + ev.x[i]] += 1.0f;
}

// SpikingJelly's split_by='time' segment bounds, in the timestamps' integer type: uint32
// arithmetic wraps as numpy's does for CIFAR10-DVS / N-MNIST.
template <class U>
void time_segments(const EventStream& ev, int64_t begin, int64_t end, int T, std::vector<int64_t>& jl,
                   std::vector<int64_t>& jr, const std::string& what) {
  const U t0 = static_cast<U>(ev.t[begin]), tn = static_cast<U>(ev.t[end - 1]);
  const U dt = static_cast<U>(static_cast<U>(tn - t0) / static_cast<U>(T));
  for (int i = 0; i < T; ++i) {
    const U tl = static_cast<U>(static_cast<U>(dt * static_cast<U>(i)) + t0), tr = static_cast<U>(tl + dt);
    int64_t first = -1, last = -1;
    for (int64_t k = begin; k < end; ++k) {
      const U t = static_cast<U>(ev.t[k]);
      if (t >= tl && t < tr) {
        if (first < 0) first = k;
        last = k;
      }
    }
    if (first < 0)
      SM_INPUT_ERROR(what << ": --split-by time: frame " << i << " of " << T << " ([" << +tl << ", " << +tr
                          << ") us) has no event; SpikingJelly fails on such a sample too (use --split-by number, or "
                          << "--skip-bad to leave it out)");
    jl[i] = first;
    jr[i] = last + 1;
  }
  jr[T - 1] = end;
}
}  // namespace

int64_t integrate_frames(const EventStream& ev, int64_t begin, int64_t end, const FrameSpec& spec, float* out,
                         const std::string& what) {
  const int T = spec.T, h = spec.height, w = spec.width;
  const int64_t frame = 2LL * h * w, n = end - begin;
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(frame) * T);
  if (spec.split_by == SplitBy::Duration) {
    if (n == 0) SM_INPUT_ERROR(what << ": no events (fixed-duration frames need at least one)");
    const int64_t tmin = *std::min_element(ev.t.begin() + begin, ev.t.begin() + end);
    const int64_t D = spec.duration_us, last = ev.t[end - 1] - tmin;
    const int64_t frames = static_cast<int64_t>(std::ceil(static_cast<double>(last) / static_cast<double>(D)));
    if (frames <= 0)
      SM_INPUT_ERROR(what << ": every event has the same timestamp, so SpikingJelly's fixed-duration grid has no frame");
    // Frame k < frames-1 takes the events up to the first whose (t - tmin) / D >= k + 1
    // (np.searchsorted on sorted times); the last frame takes the rest.
    int64_t left = begin;
    // Only the first T frames are stored: frames past them need no work (their count is `frames`).
    for (int64_t k = 0; k < std::min<int64_t>(frames, T); ++k) {
      int64_t right = end;
      if (k + 1 < frames) {
        // searchsorted(frame_index, k + 1, 'left') over the whole array: binary search as numpy does
        int64_t lo = begin, hi = end;
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          if ((ev.t[mid] - tmin) / D < k + 1) lo = mid + 1;
          else hi = mid;
        }
        right = lo;
      }
      if (right > left) add_segment(ev, left, right, h, w, out + k * frame);
      left = right;  // as SpikingJelly (an unsorted stream may move it back)
    }
    return frames;
  }
  std::vector<int64_t> jl(T), jr(T);
  if (spec.split_by == SplitBy::Number) {
    const int64_t di = n / T;
    for (int i = 0; i < T; ++i) {
      jl[i] = begin + i * di;
      jr[i] = jl[i] + di;
    }
    jr[T - 1] = end;
  } else {
    if (n == 0) SM_INPUT_ERROR(what << ": --split-by time: the sample has no event");
    if (ev.t_u32) time_segments<uint32_t>(ev, begin, end, T, jl, jr, what);
    else time_segments<int64_t>(ev, begin, end, T, jl, jr, what);
  }
  for (int i = 0; i < T; ++i) add_segment(ev, jl[i], jr[i], h, w, out + i * frame);
  return T;
}

namespace {
// torch's anti-aliased linear weights of one axis (in -> out): for output i, the first input
// index and the normalised weights (float arithmetic, as aten computes them for f32).
struct AxisWeights {
  std::vector<int64_t> first, count;
  std::vector<float> w;  // [out][support_max]
  int64_t stride = 0;
};

AxisWeights axis_weights(int in, int out) {
  AxisWeights a;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float support = scale >= 1.0f ? scale : 1.0f;  // interp_size 2: (2 * 0.5) * scale
  const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  a.stride = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  a.first.resize(out);
  a.count.resize(out);
  a.w.assign(static_cast<size_t>(out * a.stride), 0.0f);
  for (int i = 0; i < out; ++i) {
    const float center = scale * (static_cast<float>(i) + 0.5f);
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5f), 0);
    const int64_t xsize = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5f), in) - xmin;
    float total = 0.0f;
    float* wi = a.w.data() + static_cast<size_t>(i) * a.stride;
    for (int64_t j = 0; j < xsize; ++j) {
      const float x = (static_cast<float>(j + xmin) - center + 0.5f) * invscale;
      const float v = std::max(0.0f, 1.0f - std::fabs(x));
      wi[j] = v;
      total += v;
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < xsize; ++j) wi[j] /= total;
    a.first[i] = xmin;
    a.count[i] = xsize;
  }
  return a;
}
}  // namespace

void resize_bilinear_aa(const float* in, int64_t planes, int h, int w, int out_h, int out_w, float* out) {
  const AxisWeights ax = axis_weights(w, out_w), ay = axis_weights(h, out_h);
  std::vector<float> tmp(static_cast<size_t>(h) * out_w);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* src = in + pl * h * w;
    for (int r = 0; r < h; ++r)  // width pass: [h, w] -> [h, out_w]
      for (int c = 0; c < out_w; ++c) {
        const float* wt = ax.w.data() + static_cast<size_t>(c) * ax.stride;
        const float* row = src + static_cast<int64_t>(r) * w + ax.first[c];
        float acc = row[0] * wt[0];
        for (int64_t j = 1; j < ax.count[c]; ++j) acc += row[j] * wt[j];
        tmp[static_cast<size_t>(r) * out_w + c] = acc;
      }
    float* dst = out + pl * out_h * out_w;
    for (int r = 0; r < out_h; ++r) {  // height pass: [h, out_w] -> [out_h, out_w]
      const float* wt = ay.w.data() + static_cast<size_t>(r) * ay.stride;
      for (int c = 0; c < out_w; ++c) {
        const float* col = tmp.data() + static_cast<size_t>(ay.first[r]) * out_w + c;
        float acc = col[0] * wt[0];
        for (int64_t j = 1; j < ay.count[r]; ++j) acc += col[j * out_w] * wt[j];
        dst[static_cast<int64_t>(r) * out_w + c] = acc;
      }
    }
  }
}

const float* integrate_and_resize(const EventStream& ev, int64_t begin, int64_t end, const FrameSpec& spec, int out_h,
                                  int out_w, FrameScratch& scratch, const std::string& what, int64_t* n_frames) {
  const size_t raw = static_cast<size_t>(spec.T) * 2 * spec.height * spec.width;
  if (scratch.frames.size() != raw) scratch.frames.resize(raw);
  const int64_t n = integrate_frames(ev, begin, end, spec, scratch.frames.data(), what);
  if (n_frames) *n_frames = n;
  if (out_h == spec.height && out_w == spec.width) return scratch.frames.data();
  scratch.resized.resize(static_cast<size_t>(spec.T) * 2 * out_h * out_w);
  resize_bilinear_aa(scratch.frames.data(), 2LL * spec.T, spec.height, spec.width, out_h, out_w, scratch.resized.data());
  return scratch.resized.data();
}

}  // namespace sm
