// kernel_bench.cpp — `spikemesh bench --kernel ...` (kernel_bench.h).
#include "spikemesh/bench/kernel_bench.h"

#include <algorithm>
#include <cstdio>

#include "spikemesh/bench/conv_layout_bench.h"
#include "spikemesh/bench/spike_conv_sweep.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/precision.h"
#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cuda/neuron_bench.h"
#endif

namespace sm {

void run_kernel_bench(const KernelBenchOptions& o, bool print) {
  if (o.kernel == "spike-conv") {  // CPU: dense vs binary-input convolution over firing rates
    run_spike_conv_sweep(o.conv_shapes.empty() ? default_spike_conv_shapes() : o.conv_shapes,
                         o.batch_size * (o.T > 0 ? o.T : 1), static_cast<int>(std::max<int64_t>(1, o.steps)));
    return;
  }
  if (o.kernel == "winograd") {  // CPU: the dense 3×3 passes, oneDNN direct vs Winograd kernels
    run_winograd_sweep(o.conv_shapes.empty() ? default_winograd_shapes() : o.conv_shapes,
                       o.batch_size * (o.T > 0 ? o.T : 1), static_cast<int>(std::max<int64_t>(1, o.steps)));
    return;
  }
  if (o.kernel == "conv-layout")  // GPU: bf16 NCHW vs NHWC through cuDNN's graph API (T: the VGG's 10)
    return run_conv_layout_bench(o.conv_shapes, o.batch_size * (o.T > 0 ? o.T : 10),
                                 static_cast<int>(o.steps), static_cast<int>(o.warmup), o.device);
  if (o.kernel != "lif")
    SM_INPUT_ERROR("--kernel " << o.kernel
                               << ": unknown kernel benchmark (valid: lif, spike-conv, winograd, conv-layout)");
  const Device dev = select_device(device_request_from_name(o.device == "cpu" ? "cuda" : o.device), 0);
  if (!dev.is_cuda()) SM_INPUT_ERROR("--kernel lif needs a GPU (" << cuda_unavailable_reason() << ")");
#ifdef SPIKEMESH_HAVE_CUDA
  const Precision p = precision_from_name(o.precision);
  if (p != Precision::FP32 && p != Precision::BF16)
    SM_INPUT_ERROR("--kernel lif runs --precision fp32 or bf16, got " << o.precision);
  cuda::LifBenchOptions lo;
  lo.steps = o.T > 0 ? o.T : lo.steps;
  lo.neurons = o.kernel_neurons;
  lo.iters = static_cast<int>(std::max<int64_t>(1, o.steps));
  lo.warmup = static_cast<int>(o.warmup);
  lo.bf16 = p == Precision::BF16;
  const cuda::LifBenchResult r = cuda::bench_lif_cuda(lo);
  if (print) std::printf("%s", r.summary().c_str());
  std::fflush(stdout);
#else
  (void)print;
#endif
}

}  // namespace sm
