// conv_layout_bench.cpp — `spikemesh bench --kernel conv-layout`: times cifar10dvs_vgg's
// convolutions (or --conv-shape ones) in bf16 through cuDNN's graph API, NCHW against
// channels-last NHWC (x, w and y all in the layout), forward, data gradient and weight
// gradient, with CUDA events on the compute stream (median of --steps after --warmup runs; the
// first run builds the plan). A ratio NHWC/NCHW well below 1 means cuDNN's NCHW bf16 engines
// pay for layout transposes. The process's convolution policy applies; the engine in use per
// layout is printed (SPIKEMESH_LOG_LEVEL=debug names knobs, notes and workspace too). One
// rank, one GPU; refused on the CPU and in builds without CUDA or cuDNN.
#include "spikemesh/bench/conv_layout_bench.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "spikemesh/bench/spike_conv_sweep.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/conv_policy.h"

#if defined(SPIKEMESH_HAVE_CUDA) && defined(SPIKEMESH_HAVE_CUDNN)
#include <cuda_runtime_api.h>

#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cuda/conv_cudnn.h"
#include "spikemesh/kernels/cuda/conv_cudnn_graph.h"
#endif

namespace sm {

#if defined(SPIKEMESH_HAVE_CUDA) && defined(SPIKEMESH_HAVE_CUDNN)
namespace {

using cuda::ConvDirection;
using cuda::ConvLayout;

struct Buffers {  // one shape's operands in bf16 on GPU 0 (contents random; the layout is a view)
  Tensor x, w, y, dx, dw;
};

Tensor random_bf16(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Tensor t = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = normal(rng);
  return t.to(Device::cuda(0)).to_dtype(DType::BF16);
}

void run_once(ConvDirection dir, const cpu::Conv2dGeometry& g, const cuda::ConvOptions& o, Buffers& b) {
  switch (dir) {
    case ConvDirection::Forward: return cuda::conv2d_forward_cudnn(0, g, DType::BF16, b.x.raw(), b.w.raw(), b.y.raw(), o);
    case ConvDirection::BackwardData:
      return cuda::conv2d_backward_data_cudnn(0, g, DType::BF16, b.y.raw(), b.w.raw(), b.dx.raw(), o);
    case ConvDirection::BackwardFilter:
      return cuda::conv2d_backward_filter_cudnn(0, g, DType::BF16, b.x.raw(), b.y.raw(), b.dw.raw(), 0.0, o);
  }
}

// Median ms of `reps` timed runs after `warmup` untimed ones.
double median_ms(ConvDirection dir, const cpu::Conv2dGeometry& g, const cuda::ConvOptions& o, Buffers& b, int reps,
                 int warmup) {
  for (int i = 0; i < warmup; ++i) run_once(dir, g, o, b);
  cudaStream_t s = cuda::stream_for(0);
  cudaEvent_t start = nullptr, stop = nullptr;
  SM_CUDA_CHECK(cudaEventCreate(&start));
  SM_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    SM_CUDA_CHECK(cudaEventRecord(start, s));
    run_once(dir, g, o, b);
    SM_CUDA_CHECK(cudaEventRecord(stop, s));
    SM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    SM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(ms);
  }
  SM_CUDA_CHECK(cudaEventDestroy(start));
  SM_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// "12" from a plan choice "...: engine 12 (knobs ...", "?" when there is none.
std::string engine_of(const std::string& choice) {
  const size_t at = choice.find(": engine ");
  if (at == std::string::npos) return "?";
  const size_t from = at + 9, to = choice.find(' ', from);
  return choice.substr(from, to == std::string::npos ? std::string::npos : to - from);
}

std::string cell(double ms) {
  char buf[32];
  if (ms < 0) return "-";
  std::snprintf(buf, sizeof buf, "%.4f", ms);
  return buf;
}

}  // namespace

void run_conv_layout_bench(const std::vector<std::string>& shapes, int64_t batch, int reps, int warmup,
                           const std::string& device) {
  if (device == "cpu") SM_INPUT_ERROR("--kernel conv-layout times cuDNN on a GPU; --device cpu cannot run it");
  if (cuda_device_count() == 0)
    SM_INPUT_ERROR("--kernel conv-layout needs a GPU (" << cuda_unavailable_reason() << ")");
  if (batch < 1) SM_INPUT_ERROR("--kernel conv-layout needs a batch (--batch-size x --T) >= 1");
  std::string why;
  if (!cuda::cudnn_graph_api_usable(&why)) SM_INPUT_ERROR("--kernel conv-layout: " << why);
  (void)select_device(DeviceRequest::Cuda, 0);
  reps = std::max(1, reps);
  warmup = std::max(1, warmup);
  const std::vector<std::string>& list = shapes.empty() ? default_winograd_shapes() : shapes;  // the VGG's 3x3 ones
  cuda::ConvOptions base = cuda::default_conv_options();
  base.api = cuda::ConvApi::Graph;
  std::printf("conv-layout: bf16 through cuDNN's graph API, policy %s, batch·T = %lld, median of %d after %d "
              "warm-up; ms per pass (CUDA events)\n",
              gpu_numerics().conv.name.c_str(), static_cast<long long>(batch), reps, warmup);
  std::printf("  %-16s %-10s %10s %10s %10s   %s\n", "Cin,Cout,H,K", "pass", "NCHW", "NHWC", "NHWC/NCHW",
              "engine NCHW -> NHWC");
  std::mt19937 rng(3);
  double total[2] = {0.0, 0.0};
  std::vector<std::string> errors;
  for (const std::string& text : list) {
    const cpu::Conv2dGeometry g = parse_conv_shape(text, batch);
    Buffers b{random_bf16(g.input_numel(), rng), random_bf16(g.weight_numel(), rng),
              random_bf16(g.output_numel(), rng), random_bf16(g.input_numel(), rng),
              random_bf16(g.weight_numel(), rng)};
    for (ConvDirection dir : {ConvDirection::Forward, ConvDirection::BackwardData, ConvDirection::BackwardFilter}) {
      double ms[2] = {-1.0, -1.0};
      std::string engine[2];
      for (int l = 0; l < 2; ++l) {
        cuda::ConvOptions o = base;
        o.layout = l == 0 ? ConvLayout::NCHW : ConvLayout::NHWC;
        try {
          ms[l] = median_ms(dir, g, o, b, reps, warmup);
          engine[l] = engine_of(cuda::conv_graph_choice(dir, 0, g, DType::BF16, o, 0.0));
        } catch (const Error& e) {
          errors.push_back(text + " " + cuda::conv_direction_name(dir) + " " + cuda::conv_layout_name(o.layout) +
                           ": " + e.what());
        }
      }
      const bool both = ms[0] >= 0 && ms[1] >= 0;
      if (both) total[0] += ms[0], total[1] += ms[1];
      char ratio[32] = "-";
      if (both && ms[0] > 0) std::snprintf(ratio, sizeof ratio, "%.3f", ms[1] / ms[0]);
      std::printf("  %-16s %-10s %10s %10s %10s   %s -> %s\n", text.c_str(), cuda::conv_direction_name(dir),
                  cell(ms[0]).c_str(), cell(ms[1]).c_str(), ratio, engine[0].empty() ? "-" : engine[0].c_str(),
                  engine[1].empty() ? "-" : engine[1].c_str());
    }
  }
  char ratio[32] = "-";
  if (total[0] > 0) std::snprintf(ratio, sizeof ratio, "%.3f", total[1] / total[0]);
  std::printf("  %-16s %-10s %10s %10s %10s   (the passes timed in both layouts, each shape once)\n", "total", "all",
              cell(total[0]).c_str(), cell(total[1]).c_str(), ratio);
  for (const std::string& e : errors) std::printf("  not timed: %s\n", e.c_str());
  std::fflush(stdout);
}

#else  // no CUDA or no cuDNN

void run_conv_layout_bench(const std::vector<std::string>&, int64_t, int, int, const std::string& device) {
  if (device == "cpu") SM_INPUT_ERROR("--kernel conv-layout times cuDNN on a GPU; --device cpu cannot run it");
  SM_INPUT_ERROR("--kernel conv-layout needs a GPU build with cuDNN ("
                 << (built_with_cuda() ? "this build has no cuDNN" : cuda_unavailable_reason()) << ")");
}

#endif

}  // namespace sm
