// spike_conv_sweep.cpp — `spikemesh bench --kernel spike-conv`: times the dense (oneDNN) and
// the binary-input (spike_conv.h) f32 kernels of the forward pass and the weight gradient on
// random spike tensors over a range of firing rates, per convolution shape, and prints each
// pass's measured crossover (the firing rate where the two take equal time, interpolated)
// next to the rule --conv-algo auto follows (spike_conv_choice.h); and `--kernel winograd`:
// the 3×3 passes (forward, input gradient, weight gradient) through oneDNN direct, oneDNN's
// Winograd (where this CPU has it), the own F(2×2, 3×3) and F(4×4, 3×3) (winograd.h) and the
// binary-input kernel on random spikes at 15 % (not the input gradient) — every kernel
// --conv-algo auto chooses between, and the F(2×2, 3×3) it no longer takes. One process, the CPU.
#include "spikemesh/bench/spike_conv_sweep.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/cpu/isa.h"
#include "spikemesh/kernels/cpu/spike_conv.h"
#include "spikemesh/kernels/cpu/winograd.h"
#include "spikemesh/kernels/spike_conv_choice.h"

namespace sm {
namespace {

template <typename F>
double median_ms(int reps, F&& f) {
  f();  // warm-up (oneDNN primitive creation, page faults)
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The firing rate where sparse/dense crosses 1, linearly interpolated; "<lo" / ">hi" outside.
std::string crossover_text(const std::vector<double>& dens, const std::vector<double>& ratio) {
  if (ratio.front() >= 1.0) return "<" + std::to_string(static_cast<int>(100 * dens.front())) + "%";
  for (size_t i = 1; i < dens.size(); ++i) {
    if (ratio[i] >= 1.0) {
      const double d = dens[i - 1] + (1.0 - ratio[i - 1]) / (ratio[i] - ratio[i - 1]) * (dens[i] - dens[i - 1]);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f%%", 100 * d);
      return buf;
    }
  }
  return ">" + std::to_string(static_cast<int>(100 * dens.back())) + "%";
}

}  // namespace

cpu::Conv2dGeometry parse_conv_shape(const std::string& text, int64_t batch) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      v.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      SM_INPUT_ERROR("--conv-shape " << text << ": '" << item << "' is not an integer (expected Cin,Cout,H,K[,stride])");
    }
  }
  if (v.size() != 4 && v.size() != 5)
    SM_INPUT_ERROR("--conv-shape " << text << ": expected Cin,Cout,H,K[,stride] (e.g. 256,256,24,3)");
  for (int64_t e : v)
    if (e < 1) SM_INPUT_ERROR("--conv-shape " << text << ": every field must be >= 1");
  cpu::Conv2dGeometry g;
  g.batch = batch;
  g.in_channels = v[0];
  g.out_channels = v[1];
  g.height = g.width = v[2];
  g.kernel = v[3];
  g.stride = v.size() == 5 ? v[4] : 1;
  g.padding = g.kernel / 2;
  if (g.height + 2 * g.padding < g.kernel) SM_INPUT_ERROR("--conv-shape " << text << ": kernel larger than the input");
  return g;
}

const std::vector<std::string>& default_spike_conv_shapes() {
  // cifar10dvs_vgg's convolutions of spikes (features.1/3/5/7) and spikformer_ti's 1×1 ones
  static const std::vector<std::string> shapes = {"64,128,48,3", "256,256,24,3", "512,512,12,3", "512,512,6,3",
                                                  "256,768,14,1", "256,1024,14,1", "1024,256,14,1"};
  return shapes;
}

void run_spike_conv_sweep(const std::vector<std::string>& shapes, int64_t batch, int reps) {
  if (batch < 1) SM_INPUT_ERROR("--kernel spike-conv needs a batch (--batch-size × --T) >= 1");
  const std::vector<double> dens = {0.02, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50};
  std::printf("spike-conv sweep: f32, %d threads, batch·T = %lld, median of %d, sums in %s registers\n",
              omp_get_max_threads(), static_cast<long long>(batch), reps,
              cpu::avx512_kernels() ? "AVX-512" : "AVX2");
  std::printf("  time sparse / time dense per firing rate (below 1: the binary-input kernel is faster)\n");
  std::printf("  %-16s %-7s", "Cin,Cout,H,K", "pass");
  for (double d : dens) std::printf(" %5.0f%%", 100 * d);
  std::printf(" %9s %9s %9s\n", "dense ms", "crossover", "auto rule");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform;
  for (const std::string& text : shapes) {
    const cpu::Conv2dGeometry g = parse_conv_shape(text, batch);
    std::vector<float> w(g.weight_numel()), dy(g.output_numel()), y(g.output_numel()), dw(g.weight_numel());
    for (float& v : w) v = normal(rng);
    for (float& v : dy) v = normal(rng);
    std::vector<double> rf, rw;
    double dense_f = 0, dense_w = 0;
    for (double d : dens) {
      std::vector<float> x(g.input_numel());
      for (float& v : x) v = uniform(rng) < d ? 1.0f : 0.0f;
      const double df = median_ms(reps, [&] { cpu::conv2d_forward<float>(g, x.data(), w.data(), nullptr, y.data()); });
      const double sf = median_ms(reps, [&] { cpu::spike_conv2d_forward(g, x.data(), w.data(), nullptr, y.data()); });
      const double dwd = median_ms(reps, [&] {
        cpu::conv2d_backward_weights<float>(g, x.data(), dy.data(), dw.data(), nullptr);
      });
      const double swd = median_ms(reps, [&] {
        cpu::spike_conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), nullptr);
      });
      rf.push_back(sf / df);
      rw.push_back(swd / dwd);
      dense_f += df / dens.size();
      dense_w += dwd / dens.size();
    }
    for (int pass = 0; pass < 2; ++pass) {
      const std::vector<double>& r = pass == 0 ? rf : rw;
      std::printf("  %-16s %-7s", text.c_str(), pass == 0 ? "forward" : "weights");
      for (double v : r) std::printf(" %6.2f", v);
      std::printf(" %9.1f %9s %8.0f%%\n", pass == 0 ? dense_f : dense_w, crossover_text(dens, r).c_str(),
                  100 * spike_conv_crossover_vs_direct(pass == 0 ? ConvPass::Forward : ConvPass::Weights, g));
    }
    std::fflush(stdout);
  }
}

const std::vector<std::string>& default_winograd_shapes() {
  // cifar10dvs_vgg's 3×3 convolutions (the frame layer, then the spike layers)
  static const std::vector<std::string> shapes = {"2,64,48,3",    "64,128,48,3",  "128,256,24,3", "256,256,24,3",
                                                  "256,512,12,3", "512,512,12,3", "512,512,6,3"};
  return shapes;
}

void run_winograd_sweep(const std::vector<std::string>& shapes, int64_t batch, int reps) {
  if (batch < 1) SM_INPUT_ERROR("--kernel winograd needs a batch (--batch-size × --T) >= 1");
  std::printf("winograd sweep: f32, %d threads, batch·T = %lld, median of %d; ms per pass\n",
              omp_get_max_threads(), static_cast<long long>(batch), reps);
  std::printf("  %-16s %-7s %10s %12s %12s %12s %14s\n", "Cin,Cout,H,K", "pass", "direct", "oneDNN wino",
              "own F(2,3)", "own F(4,3)", "spikes at 15%");
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (const std::string& text : shapes) {
    const cpu::Conv2dGeometry g = parse_conv_shape(text, batch);
    if (!cpu::winograd_f2_applies(g)) {
      std::printf("  %-16s not a 3x3 stride-1 convolution: skipped\n", text.c_str());
      continue;
    }
    std::vector<float> x(g.input_numel()), w(g.weight_numel()), y(g.output_numel()), dy(g.output_numel()),
        dx(g.input_numel());
    for (auto* v : {&x, &w, &dy})
      for (float& e : *v) e = normal(rng);
    // spikes at 15 % (the VGG's measured firing rate) for the binary-input kernel's column
    std::vector<float> spikes(g.input_numel());
    std::uniform_real_distribution<float> uniform;
    for (float& v : spikes) v = uniform(rng) < 0.15f ? 1.0f : 0.0f;
    std::vector<float> dw(g.weight_numel());
    const bool dnnl_wino = cpu::conv2d_winograd_available(g);
    const char* names[] = {"forward", "data", "weights"};
    for (int pass = 0; pass < 3; ++pass) {
      const auto time = [&](auto fwd, auto data, auto weights) {
        return median_ms(reps, [&] { pass == 0 ? fwd() : pass == 1 ? data() : weights(); });
      };
      const double direct = time([&] { cpu::conv2d_forward_dnnl(g, x.data(), w.data(), nullptr, y.data()); },
                                 [&] { cpu::conv2d_backward_data_dnnl(g, dy.data(), w.data(), dx.data()); },
                                 [&] { cpu::conv2d_backward_weights_dnnl(g, x.data(), dy.data(), dw.data(), nullptr); });
      const auto cell = [](double ms) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", ms);
        return std::string(buf);
      };
      std::string wino = "none here", own = "-", own4 = "-", sparse = "-";
      if (dnnl_wino)
        wino = cell(time([&] { cpu::conv2d_forward_winograd_dnnl(g, x.data(), w.data(), nullptr, y.data()); },
                         [&] { cpu::conv2d_backward_data_winograd_dnnl(g, dy.data(), w.data(), dx.data()); },
                         [&] { cpu::conv2d_backward_weights_winograd_dnnl(g, x.data(), dy.data(), dw.data(), nullptr); }));
      own = cell(time([&] { cpu::conv2d_forward_winograd_f2(g, x.data(), w.data(), nullptr, y.data()); },
                      [&] { cpu::conv2d_backward_data_winograd_f2(g, dy.data(), w.data(), dx.data()); },
                      [&] { cpu::conv2d_backward_weights_winograd_f2(g, x.data(), dy.data(), dw.data(), nullptr); }));
      own4 = cell(time([&] { cpu::conv2d_forward_winograd_f4(g, x.data(), w.data(), nullptr, y.data()); },
                       [&] { cpu::conv2d_backward_data_winograd_f4(g, dy.data(), w.data(), dx.data()); },
                       [&] { cpu::conv2d_backward_weights_winograd_f4(g, x.data(), dy.data(), dw.data(), nullptr); }));
      if (pass != 1)  // the input gradient has no binary operand
        sparse = cell(time([&] { cpu::spike_conv2d_forward(g, spikes.data(), w.data(), nullptr, y.data()); }, [] {},
                           [&] { cpu::spike_conv2d_backward_weights(g, spikes.data(), dy.data(), dw.data(), nullptr); }));
      std::printf("  %-16s %-7s %10.1f %12s %12s %12s %14s\n", text.c_str(), names[pass], direct, wino.c_str(),
                  own.c_str(), own4.c_str(), sparse.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace sm
