// synth_dvs.cpp — a synthetic, learnable event dataset shaped like CIFAR10-DVS.
// Sample i of a split is a pure function of (seed, split, i): a bar of random length and
// thickness moves across the frame in the class's direction; ON events where it arrives,
// OFF events where it leaves, Bernoulli noise elsewhere.
#include <cmath>

#include "spikemesh/core/log.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/importers.h"

namespace sm {

namespace {
// Is pixel (r, c) covered by the bar of sample s at time t?
struct Bar {
  double cx, cy, dx, dy, nx, ny, half_len, half_w;
  bool covers(double r, double c, int t) const {
    double px = c - (cx + dx * t), py = r - (cy + dy * t);
    double along = px * nx + py * ny, across = -px * ny + py * nx;
    return std::fabs(along) <= half_w && std::fabs(across) <= half_len;
  }
};

void make_sample(const SynthDvsConfig& cfg, const CounterRng& rng, int64_t i, int label, uint8_t* out) {
  const int S = cfg.size;
  auto u = [&](uint32_t k) { return rng.uniform(static_cast<uint64_t>(i), k); };
  double ang = 2.0 * M_PI * label / cfg.classes + (u(0) - 0.5) * 0.3;
  double speed = S * (0.6 + 0.4 * u(1)) / cfg.T;
  Bar b;
  b.dx = std::cos(ang) * speed;
  b.dy = std::sin(ang) * speed;
  b.nx = std::cos(ang);
  b.ny = std::sin(ang);
  b.cx = S / 2.0 - b.dx * cfg.T / 2.0 + (u(2) - 0.5) * S * 0.2;
  b.cy = S / 2.0 - b.dy * cfg.T / 2.0 + (u(3) - 0.5) * S * 0.2;
  b.half_len = S * (0.15 + 0.15 * u(4));
  b.half_w = 1.0 + 1.5 * u(5);
  const int64_t plane = static_cast<int64_t>(S) * S;
  for (int t = 0; t < cfg.T; ++t)
    for (int r = 0; r < S; ++r)
      for (int c = 0; c < S; ++c) {
        bool now = b.covers(r, c, t), before = t > 0 && b.covers(r, c, t - 1);
        int64_t pix = static_cast<int64_t>(r) * S + c;
        uint64_t key = (static_cast<uint64_t>(t) * plane + pix);
        double noise = rng.uniform(key, 1000u + static_cast<uint32_t>(i >> 20), static_cast<uint32_t>(i));
        uint8_t on = (now && !before) ? 2 : 0, off = (before && !now) ? 2 : 0;
        if (now && before) on = 1;
        if (noise < 0.01) on += 1;
        else if (noise > 0.99) off += 1;
        out[(t * 2 + 0) * plane + pix] = on;
        out[(t * 2 + 1) * plane + pix] = off;
      }
}
}  // namespace

int64_t make_synth_dvs(const SynthDvsConfig& cfg, const std::string& out) {
  if (cfg.classes < 2) SM_INPUT_ERROR("--classes must be >= 2, got " << cfg.classes);
  if (cfg.T < 1) SM_INPUT_ERROR("--T must be >= 1, got " << cfg.T);
  if (cfg.size < 4) SM_INPUT_ERROR("--size must be >= 4, got " << cfg.size);
  if (cfg.train < 1 || cfg.test < 1) SM_INPUT_ERROR("--train and --test must be >= 1");
  DatasetInfo info;
  info.num_classes = cfg.classes;
  info.T = cfg.T;
  info.layout = "NTCHW";
  info.encoding = "events";
  info.source = "synth-dvs (seed " + std::to_string(cfg.seed) + ")";
  info.x_scale = 1.0;
  info.sample_shape = {cfg.T, 2, cfg.size, cfg.size};
  info.stored = DType::U8;
  info.train_size = cfg.train;
  info.test_size = cfg.test;
  H5DatasetWriter w(out, info);
  const int64_t row = shape_numel(info.sample_shape);
  for (Split s : {Split::Train, Split::Test}) {
    int64_t n = s == Split::Train ? cfg.train : cfg.test;
    CounterRng rng(cfg.seed, std::string("synth-dvs/") + split_name(s));
    CounterRng lab_rng(cfg.seed, std::string("synth-dvs-label/") + split_name(s));
    const int64_t chunk = 256;
    for (int64_t b = 0; b < n; b += chunk) {
      int64_t m = std::min(chunk, n - b);
      Tensor x = Tensor::empty({m, cfg.T, 2, cfg.size, cfg.size}, DType::U8);
      Tensor y = Tensor::empty({m}, DType::I64);
#pragma omp parallel for schedule(dynamic)
      for (int64_t k = 0; k < m; ++k) {
        int label = static_cast<int>(lab_rng.uniform(b + k) * cfg.classes) % cfg.classes;
        y.data<int64_t>()[k] = label;
        make_sample(cfg, rng, b + k, label, x.data<uint8_t>() + k * row);
      }
      w.write(s, b, x, y);
    }
  }
  w.commit();
  SM_INFO("wrote " << out << ": " << cfg.train << " train + " << cfg.test << " test samples [T=" << cfg.T
                   << ", 2, " << cfg.size << ", " << cfg.size << "], " << cfg.classes << " classes");
  return cfg.train + cfg.test;
}

}  // namespace sm
