// augment.cpp — the steps of `--augment` on raw samples (data/augment.h). Draws come from
// counter streams keyed by (seed, purpose) with the sub-stream (epoch, global sample index);
// step s of the spec takes the counters (s << 32) + 0, 1, 2, ... of its stream. Compiled
// without floating-point contraction (Makefile) so that rotation's source pixels and the
// mixing arithmetic are exactly what the test's numpy reference computes.
#include "spikemesh/data/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "spikemesh/core/error.h"
#include "spikemesh/core/rng.h"

namespace sm {

namespace {

constexpr double kPi = 3.14159265358979323846;

// The draws of one step of the spec for one sample, in order.
class Draws {
 public:
  Draws(const CounterRng& rng, size_t step, int64_t epoch, int64_t sample)
      : rng_(rng), base_(static_cast<uint64_t>(step) << 32), a_(static_cast<uint32_t>(epoch)),
        b_(static_cast<uint32_t>(sample)) {}
  double uniform() { return rng_.uniform(base_ + k_++, a_, b_); }
  double normal() { return rng_.normal(base_ + k_++, a_, b_); }
  // Uniform over the integers lo..hi.
  int64_t integer(int64_t lo, int64_t hi) {
    const double span = static_cast<double>(hi - lo + 1);
    return lo + std::min(hi - lo, static_cast<int64_t>(std::floor(uniform() * span)));
  }

 private:
  const CounterRng& rng_;
  uint64_t base_, k_ = 0;
  uint32_t a_, b_;
};

// log of a Gamma(a, 1) draw by Marsaglia and Tsang (a < 1 boosted through a + 1), in logs so
// that the tiny shapes mixing allows do not underflow to 0.
double log_gamma_draw(double a, Draws& d) {
  if (a < 1) {
    const double u = d.uniform();
    return log_gamma_draw(a + 1, d) + std::log(u) / a;
  }
  const double dd = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * dd);
  for (;;) {
    const double x = d.normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = d.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return std::log(dd * v);
    if (std::log(u) < 0.5 * x * x + dd * (1.0 - v + std::log(v))) return std::log(dd * v);
  }
}

// Beta(alpha, alpha) as G1 / (G1 + G2) = 1 / (1 + exp(log G2 - log G1)).
double beta_draw(double alpha, Draws& d) {
  const double l1 = log_gamma_draw(alpha, d), l2 = log_gamma_draw(alpha, d);
  if (std::isinf(l1) && std::isinf(l2)) return 0.5;
  return 1.0 / (1.0 + std::exp(l2 - l1));
}

// Shifts every plane [H, W] of a sample by (dy, dx): out[i][j] = in[i - dy][j - dx], zero
// outside (or wrapped around with `wrap`).
void shift_planes(float* x, const SampleGeometry& g, int64_t dy, int64_t dx, bool wrap, std::vector<float>& tmp) {
  const int64_t H = g.H, W = g.W, planes = g.T * g.C;
  tmp.resize(static_cast<size_t>(H * W));
  for (int64_t p = 0; p < planes; ++p) {
    float* plane = x + p * H * W;
    std::memcpy(tmp.data(), plane, sizeof(float) * static_cast<size_t>(H * W));
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        int64_t si = i - dy, sj = j - dx;
        if (wrap) {
          si = ((si % H) + H) % H;
          sj = ((sj % W) + W) % W;
        }
        plane[i * W + j] = si >= 0 && si < H && sj >= 0 && sj < W ? tmp[static_cast<size_t>(si * W + sj)] : 0.0f;
      }
  }
}

void flip_planes(float* x, const SampleGeometry& g, bool vertical) {
  const int64_t H = g.H, W = g.W;
  for (int64_t p = 0; p < g.T * g.C; ++p) {
    float* plane = x + p * H * W;
    if (vertical) {
      for (int64_t i = 0; i < H / 2; ++i)
        std::swap_ranges(plane + i * W, plane + (i + 1) * W, plane + (H - 1 - i) * W);
    } else {
      for (int64_t i = 0; i < H; ++i) std::reverse(plane + i * W, plane + (i + 1) * W);
    }
  }
}

// Nearest-pixel rotation about the centre ((H-1)/2, (W-1)/2); positive angles turn the picture
// counter-clockwise as displayed with row 0 on top.
void rotate_planes(float* x, const SampleGeometry& g, double c, double s, std::vector<float>& tmp) {
  const int64_t H = g.H, W = g.W;
  const double cy = static_cast<double>(H - 1) / 2.0, cx = static_cast<double>(W - 1) / 2.0;
  std::vector<int64_t> src(static_cast<size_t>(H * W));
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j < W; ++j) {
      const double di = static_cast<double>(i) - cy, dj = static_cast<double>(j) - cx;
      const double sx = c * dj - s * di + cx, sy = s * dj + c * di + cy;
      const double xi = std::floor(sx + 0.5), yi = std::floor(sy + 0.5);
      const bool inside = xi >= 0 && xi < static_cast<double>(W) && yi >= 0 && yi < static_cast<double>(H);
      src[static_cast<size_t>(i * W + j)] = inside ? static_cast<int64_t>(yi) * W + static_cast<int64_t>(xi) : -1;
    }
  tmp.resize(static_cast<size_t>(H * W));
  for (int64_t p = 0; p < g.T * g.C; ++p) {
    float* plane = x + p * H * W;
    std::memcpy(tmp.data(), plane, sizeof(float) * static_cast<size_t>(H * W));
    for (int64_t q = 0; q < H * W; ++q) {
      const int64_t from = src[static_cast<size_t>(q)];
      plane[q] = from >= 0 ? tmp[static_cast<size_t>(from)] : 0.0f;
    }
  }
}

// Copies (from != nullptr) or zeroes the box [y0, y1) x [x0, x1) of every plane.
void fill_box(float* x, const float* from, const SampleGeometry& g, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
  for (int64_t p = 0; p < g.T * g.C; ++p)
    for (int64_t i = y0; i < y1; ++i)
      for (int64_t j = x0; j < x1; ++j) {
        const int64_t q = p * g.H * g.W + i * g.W + j;
        x[q] = from ? from[q] : 0.0f;
      }
}

// out[t] = in[t - s] along time, zero outside.
void shift_time(float* x, const SampleGeometry& g, int64_t s) {
  const int64_t block = g.C * g.H * g.W;
  std::vector<float> tmp(x, x + g.numel());
  for (int64_t t = 0; t < g.T; ++t) {
    const int64_t from = t - s;
    if (from >= 0 && from < g.T)
      std::memcpy(x + t * block, tmp.data() + from * block, sizeof(float) * static_cast<size_t>(block));
    else
      std::fill(x + t * block, x + (t + 1) * block, 0.0f);
  }
}

// out[..., j] = in[..., j - s] along the last axis, zero outside.
void shift_last_axis(float* x, const SampleGeometry& g, int64_t s) {
  const int64_t W = g.W, rows = g.numel() / W;
  std::vector<float> tmp(static_cast<size_t>(W));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * W;
    std::memcpy(tmp.data(), row, sizeof(float) * static_cast<size_t>(W));
    for (int64_t j = 0; j < W; ++j) row[j] = j - s >= 0 && j - s < W ? tmp[static_cast<size_t>(j - s)] : 0.0f;
  }
}

// Each event of the integer counts kept with probability 1 - rate; returns the events dropped.
// Event j of element e of step `step` draws counter (step << 48) | (e << 16) | j (counts are
// below 2^16, elements below 2^32).
int64_t drop_events(float* x, const SampleGeometry& g, double rate, const CounterRng& rng, size_t step, int64_t epoch,
                    int64_t sample) {
  int64_t dropped = 0;
  for (int64_t e = 0; e < g.numel(); ++e) {
    const int64_t count = static_cast<int64_t>(x[e]);
    int64_t kept = 0;
    for (int64_t j = 0; j < count; ++j)
      kept += rng.uniform((static_cast<uint64_t>(step) << 48) | (static_cast<uint64_t>(e) << 16) |
                              static_cast<uint64_t>(j),
                          static_cast<uint32_t>(epoch), static_cast<uint32_t>(sample)) >= rate;
    dropped += count - kept;
    x[e] = static_cast<float>(kept);
  }
  return dropped;
}

SampleGeometry geometry_of(const DatasetInfo& info) {
  const Shape& s = info.sample_shape;
  SampleGeometry g;
  if (info.is_events() && s.size() == 4) {
    g.T = s[0], g.C = s[1], g.H = s[2], g.W = s[3];
    g.has_time = true;
  } else if (!info.is_events() && s.size() == 3) {
    g.C = s[0], g.H = s[1], g.W = s[2];
  } else {
    SM_INPUT_ERROR("--augment: " << info.path << ": samples of shape " << shape_str(s)
                                 << " (expected [T, C, H, W] events or [C, H, W] images)");
  }
  return g;
}

// The mixing step that fires for a sample, if one does, with what it draws.
MixDraw draw_mix(const AugmentSpec& spec, const CounterRng& rng, const SampleGeometry& g, int64_t train_size,
                 int64_t epoch, int64_t sample) {
  MixDraw m;
  for (size_t s = 0; s < spec.steps.size(); ++s) {
    const AugmentStep& st = spec.steps[s];
    if (!is_mixing(st.op)) continue;
    Draws d(rng, s, epoch, sample);
    if (!(d.uniform() < st.p)) continue;
    m.step = static_cast<int>(s);
    m.partner = d.integer(0, train_size - 1);
    m.lam = beta_draw(st.magnitude, d);
    if (st.op == AugmentOp::Cutmix) {
      m.cy = d.integer(0, g.H - 1);
      m.cx = d.integer(0, g.W - 1);
    }
    break;
  }
  return m;
}

// The preview's view of the partners: each mixed sample's partner index and its row as read
// (rows `partner_x` in the order of the mixed samples `row_of`), zeros for the other samples.
void trace_partners(const Augmenter& aug, const Tensor& partner_x, const std::vector<size_t>& row_of,
                    const std::vector<int64_t>& partner_idx, const Shape& batch_shape, AugmentTrace& trace) {
  const int64_t F = aug.geometry().numel();
  trace.partner_raw = Tensor::zeros(batch_shape, DType::F32);
  for (size_t r = 0; r < row_of.size(); ++r) {
    trace.partner[row_of[r]] = partner_idx[r];
    std::memcpy(trace.partner_raw.data<float>() + static_cast<int64_t>(row_of[r]) * F,
                partner_x.data<float>() + static_cast<int64_t>(r) * F, sizeof(float) * static_cast<size_t>(F));
  }
}

}  // namespace

Augmenter::Augmenter(AugmentSpec spec, const DatasetInfo& info, uint64_t seed)
    : spec_(std::move(spec)), geo_(geometry_of(info)), train_size_(info.train_size), num_classes_(info.num_classes),
      seed_(seed) {
  if (spec_.has(AugmentOp::TimeShift) && !geo_.has_time)
    SM_INPUT_ERROR("--augment timeshift: " << info.path << " holds static images (no time axis to shift)");
  if (spec_.has(AugmentOp::DropEvent) &&
      !((info.stored_name == "u8" || info.stored_name == "u16") && info.x_scale == 1.0 && !info.resized))
    SM_INPUT_ERROR("--augment dropevent: " << info.path << " does not hold integer event counts (stored "
                                           << info.stored_name << ", x_scale " << info.x_scale
                                           << (info.resized ? ", resized" : "")
                                           << "); it needs frames imported as u8 or u16 without --size");
  if (spec_.mixes() && train_size_ < 1) SM_INPUT_ERROR("--augment: " << info.path << " has no training samples to mix");
  if (spec_.has(AugmentOp::DropEvent) && geo_.numel() >= (int64_t{1} << 32))
    SM_INPUT_ERROR("--augment dropevent: " << info.path << " has samples of 2^32 values or more");
}

std::vector<MixDraw> Augmenter::mix_draws(const std::vector<int64_t>& idx, int64_t epoch) const {
  const CounterRng rng(seed_, "augment-mix");
  std::vector<MixDraw> out(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) out[i] = draw_mix(spec_, rng, geo_, train_size_, epoch, idx[i]);
  return out;
}

void Augmenter::transform(Tensor& x, const std::vector<int64_t>& idx, int64_t epoch, bool as_partner,
                          AugmentRecord* record) const {
  SM_CHECK(x.dtype() == DType::F32 && x.numel() == static_cast<int64_t>(idx.size()) * geo_.numel(),
           "augment: rows do not match the samples");
  const CounterRng rng(seed_, as_partner ? "augment-partner" : "augment");
  const CounterRng drop_rng(seed_, as_partner ? "augment-partner-drop" : "augment-drop");
  if (record) record->assign(idx.size(), {});
  const int64_t n = static_cast<int64_t>(idx.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    float* sample = x.data<float>() + i * geo_.numel();
    std::vector<float> tmp;
    for (size_t s = 0; s < spec_.steps.size(); ++s) {
      const AugmentStep& st = spec_.steps[s];
      if (is_mixing(st.op)) continue;
      Draws d(rng, s, epoch, idx[static_cast<size_t>(i)]);
      if (!(d.uniform() < st.p)) continue;
      AppliedAugment a;
      a.step = static_cast<int>(s);
      a.op = st.op;
      const int64_t m = static_cast<int64_t>(st.magnitude);
      switch (st.op) {
        case AugmentOp::HFlip:
        case AugmentOp::VFlip:
          flip_planes(sample, geo_, st.op == AugmentOp::VFlip);
          break;
        case AugmentOp::Translate:
        case AugmentOp::Roll: {
          const int64_t dy = d.integer(-m, m), dx = d.integer(-m, m);
          shift_planes(sample, geo_, dy, dx, st.op == AugmentOp::Roll, tmp);
          a.v[0] = static_cast<double>(dy), a.v[1] = static_cast<double>(dx);
          break;
        }
        case AugmentOp::Rotate: {
          const double deg = (2.0 * d.uniform() - 1.0) * st.magnitude, rad = deg * kPi / 180.0;
          a.v[0] = deg, a.v[1] = std::cos(rad), a.v[2] = std::sin(rad);
          rotate_planes(sample, geo_, a.v[1], a.v[2], tmp);
          break;
        }
        case AugmentOp::Cutout: {
          const int64_t cy = d.integer(0, geo_.H - 1), cx = d.integer(0, geo_.W - 1);
          const int64_t y0 = std::max<int64_t>(0, cy - m / 2), y1 = std::min(geo_.H, cy - m / 2 + m);
          const int64_t x0 = std::max<int64_t>(0, cx - m / 2), x1 = std::min(geo_.W, cx - m / 2 + m);
          fill_box(sample, nullptr, geo_, y0, y1, x0, x1);
          a.v[0] = static_cast<double>(y0), a.v[1] = static_cast<double>(y1);
          a.v[2] = static_cast<double>(x0), a.v[3] = static_cast<double>(x1);
          break;
        }
        case AugmentOp::TimeShift:
        case AugmentOp::Jitter: {
          const int64_t sh = d.integer(-m, m);
          if (st.op == AugmentOp::TimeShift)
            shift_time(sample, geo_, sh);
          else
            shift_last_axis(sample, geo_, sh);
          a.v[0] = static_cast<double>(sh);
          break;
        }
        case AugmentOp::DropEvent:
          a.v[0] = static_cast<double>(
              drop_events(sample, geo_, st.magnitude, drop_rng, s, epoch, idx[static_cast<size_t>(i)]));
          break;
        default:
          break;
      }
      if (record) (*record)[static_cast<size_t>(i)].push_back(a);
    }
  }
}

Tensor Augmenter::mix(Tensor& x, const Tensor& partner_x, const Tensor& partner_y, const std::vector<MixDraw>& draws,
                      const Tensor& y, AugmentRecord* record) const {
  const int64_t n = static_cast<int64_t>(draws.size()), k = num_classes_, F = geo_.numel();
  const int64_t mixed = std::count_if(draws.begin(), draws.end(), [](const MixDraw& m) { return m.step >= 0; });
  SM_CHECK(x.numel() == n * F && partner_x.numel() == mixed * F && partner_y.numel() == mixed,
           "augment: partner rows do not match the mixed samples");
  Tensor target = Tensor::zeros({n, k}, DType::F64);
  double* t = target.data<double>();
  if (record && record->size() != draws.size()) record->resize(draws.size());
  for (int64_t i = 0, r = 0; i < n; ++i) {
    const MixDraw& m = draws[static_cast<size_t>(i)];
    const int64_t label = y.data<int64_t>()[i];
    if (m.step < 0) {
      t[i * k + label] = 1.0;
      continue;
    }
    float* a = x.data<float>() + i * F;
    const float* b = partner_x.data<float>() + r * F;
    AppliedAugment rec;
    rec.step = m.step;
    rec.op = spec_.steps[static_cast<size_t>(m.step)].op;
    double lam = m.lam;
    if (rec.op == AugmentOp::Mixup) {
      for (int64_t q = 0; q < F; ++q)
        a[q] = static_cast<float>(lam * static_cast<double>(a[q]) + (1.0 - lam) * static_cast<double>(b[q]));
    } else {  // CutMix: a box of (1 - lam) of the area, centred on the drawn pixel (timm's rand_bbox)
      const double cut = std::sqrt(1.0 - lam);
      const int64_t ch = static_cast<int64_t>(static_cast<double>(geo_.H) * cut);
      const int64_t cw = static_cast<int64_t>(static_cast<double>(geo_.W) * cut);
      const int64_t y0 = std::clamp<int64_t>(m.cy - ch / 2, 0, geo_.H), y1 = std::clamp<int64_t>(m.cy + ch / 2, 0, geo_.H);
      const int64_t x0 = std::clamp<int64_t>(m.cx - cw / 2, 0, geo_.W), x1 = std::clamp<int64_t>(m.cx + cw / 2, 0, geo_.W);
      fill_box(a, b, geo_, y0, y1, x0, x1);
      lam = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(geo_.H * geo_.W);
      rec.v[2] = static_cast<double>(y0), rec.v[3] = static_cast<double>(y1);
      rec.v[4] = static_cast<double>(x0), rec.v[5] = static_cast<double>(x1);
    }
    rec.v[0] = static_cast<double>(m.partner), rec.v[1] = lam;
    t[i * k + label] += lam;
    t[i * k + partner_y.data<int64_t>()[r++]] += 1.0 - lam;
    if (record) (*record)[static_cast<size_t>(i)].push_back(rec);
  }
  return target;
}

Tensor augment_batch(const Augmenter& aug, const H5Dataset& ds, Split split, Tensor& raw,
                     const std::vector<int64_t>& idx, const Tensor& y, int64_t epoch, AugmentTrace* trace) {
  SM_CHECK(split == Split::Train, "augment: only training samples are augmented");
  AugmentRecord* record = trace ? &trace->record : nullptr;
  if (trace) trace->partner.assign(idx.size(), -1);
  if (!aug.mixes()) {
    aug.transform(raw, idx, epoch, false, record);
    return Tensor();
  }
  const std::vector<MixDraw> draws = aug.mix_draws(idx, epoch);
  std::vector<int64_t> read_idx, host_idx;  // the partners to read, and whose partners they are
  std::vector<size_t> row_of;                // the mixed samples' rows in the batch
  for (size_t i = 0; i < idx.size(); ++i)
    if (draws[i].step >= 0) {
      read_idx.push_back(draws[i].partner);
      host_idx.push_back(idx[i]);
      row_of.push_back(i);
    }
  Tensor partner_x = Tensor::empty({0}, DType::F32), partner_y = Tensor::empty({0}, DType::I64);
  if (!read_idx.empty()) ds.read(split, read_idx, partner_x, partner_y);  // [mixed, ...sample]
  AugmentRecord picked_record;
  if (trace) trace_partners(aug, partner_x, row_of, read_idx, raw.shape(), *trace);
  if (!read_idx.empty()) aug.transform(partner_x, host_idx, epoch, true, trace ? &picked_record : nullptr);
  if (trace) {
    trace->partner_record.assign(idx.size(), {});
    for (size_t r = 0; r < row_of.size(); ++r) trace->partner_record[row_of[r]] = picked_record[r];
  }
  aug.transform(raw, idx, epoch, false, record);
  return aug.mix(raw, partner_x, partner_y, draws, y, record);
}

}  // namespace sm
