// test_gpu_core.cpp — the CUDA runtime of core/: device requests and selection, --precision,
// the loss scaler, host bf16/f16 conversions (these run everywhere), and on a GPU (tests named
// *Gpu*, skipped without one): the caching device allocator (block reuse, current/peak
// accounting, no cudaMalloc in the steady state of a training step, the out-of-memory message),
// copies between host, pinned host and device memory for every dtype, device fill/convert.
// References are independent: host values written by hand or by the host converters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include "spikemesh/core/allocator.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/models/spec_loader.h"
#include "spikemesh/optim/optimizer_cuda.h"

namespace sm {
namespace {

#define SKIP_WITHOUT_GPU()                                                   \
  do {                                                                       \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";                  \
  } while (0)

std::string error_of(const std::function<void()>& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

// ---- runs everywhere ---------------------------------------------------------------------

TEST(DeviceRequest, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(device_request_from_name("cpu"), DeviceRequest::Cpu);
  EXPECT_EQ(device_request_from_name("CUDA"), DeviceRequest::Cuda);
  EXPECT_EQ(device_request_from_name("auto"), DeviceRequest::Auto);
  ErrorKind k{};
  const std::string msg = error_of([] { device_request_from_name("tpu"); }, &k);
  EXPECT_EQ(k, ErrorKind::Input);
  EXPECT_NE(msg.find("--device tpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu, cuda, auto"), std::string::npos) << msg;
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
}

TEST(DeviceSelect, CpuAlwaysAndGpuOnlyWhenVisible) {
  EXPECT_TRUE(select_device(DeviceRequest::Cpu, 5).is_cpu());
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
    EXPECT_TRUE(select_device(DeviceRequest::Auto, 0).is_cpu());
    ErrorKind k{};
    const std::string msg = error_of([] { select_device(DeviceRequest::Cuda, 0); }, &k);
    EXPECT_EQ(k, ErrorKind::Input);
    EXPECT_NE(msg.find("--device cuda: no usable GPU"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  } else {
    const int n = cuda_device_count();
    const Device d = select_device(DeviceRequest::Auto, n + 1);  // local rank n+1 -> GPU 1 % n
    EXPECT_TRUE(d.is_cuda());
    EXPECT_EQ(d.ordinal, (n + 1) % n);
    EXPECT_EQ(select_device(DeviceRequest::Cuda, 0), Device::cuda(0));
  }
}

TEST(Precision, ParsesNamesAndChecksTheDevice) {
  EXPECT_EQ(precision_from_name("fp32"), Precision::FP32);
  EXPECT_EQ(precision_from_name("BF16"), Precision::BF16);
  EXPECT_EQ(precision_from_name("fp16"), Precision::FP16);
  EXPECT_EQ(precision_from_name("f64"), Precision::FP64);
  EXPECT_EQ(activation_dtype(Precision::BF16), DType::BF16);
  EXPECT_EQ(master_dtype(Precision::FP16), DType::F32);
  EXPECT_EQ(master_dtype(Precision::FP64), DType::F64);
  ErrorKind k{};
  std::string msg = error_of([] { precision_from_name("fp8"); }, &k);
  EXPECT_EQ(k, ErrorKind::Input);
  EXPECT_NE(msg.find("--precision fp8: unsupported precision"), std::string::npos) << msg;
  msg = error_of([] { check_precision_for_device(Precision::BF16, Device::cpu()); });
  EXPECT_NE(msg.find("runs on a GPU only"), std::string::npos) << msg;
  msg = error_of([] { check_precision_for_device(Precision::FP64, Device::cuda(0)); });
  EXPECT_NE(msg.find("CPU only"), std::string::npos) << msg;
  EXPECT_EQ(error_of([] { check_precision_for_device(Precision::FP64, Device::cpu()); }), "");
  EXPECT_EQ(error_of([] { check_precision_for_device(Precision::FP16, Device::cuda(0)); }), "");
}

TEST(LossScaler, UnscalesChecksBacksOffAndGrows) {
  LossScalerConfig c;
  c.dynamic = true;
  c.init_scale = 8.0;
  c.growth_interval = 2;
  LossScaler s(c);
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 8.0);
  Tensor g = Tensor::empty({3}, DType::F32);
  g.data<float>()[0] = 16.0f;
  g.data<float>()[1] = -4.0f;
  g.data<float>()[2] = 0.5f;
  Tensor g64 = Tensor::full({2}, 24.0, DType::F64);
  EXPECT_TRUE(s.unscale_and_check({&g, &g64}));
  EXPECT_EQ(g.at(0), 2.0);
  EXPECT_EQ(g.at(1), -0.5);
  EXPECT_EQ(g.at(2), 0.0625);
  EXPECT_EQ(g64.at(1), 3.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 8.0);
  s.update(true);  // growth_interval finite steps in a row
  EXPECT_EQ(s.scale(), 16.0);
  g.data<float>()[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(s.unscale_and_check({&g}));
  s.update(false);
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.finite_in_row(), 0);
  g.data<float>()[1] = std::nanf("");
  EXPECT_FALSE(s.unscale_and_check({&g}));
  // Disabled (fp32/bf16): scale 1, nothing touched, every step taken.
  LossScaler off = LossScaler::for_precision(Precision::BF16);
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.scale(), 1.0);
  Tensor h = Tensor::full({1}, 5.0, DType::F32);
  EXPECT_TRUE(off.unscale_and_check({&h}));
  EXPECT_EQ(h.at(0), 5.0);
  EXPECT_TRUE(LossScaler::for_precision(Precision::FP16).enabled());
  EXPECT_EQ(LossScaler::for_precision(Precision::FP16).scale(), 65536.0);
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One value through f32 -> dt -> f32 on the host.
double host_round_trip(float v, DType dt) {
  Tensor t = Tensor::full({1}, 0.0, DType::F32);
  t.data<float>()[0] = v;
  return t.to_dtype(dt).to_dtype(DType::F32).at(0);
}

TEST(TensorHalf, HostBf16AndF16RoundToNearestEven) {
  // bf16: 8 significant bits.
  EXPECT_EQ(host_round_trip(1.0f, DType::BF16), 1.0);
  EXPECT_EQ(host_round_trip(1.0f + std::ldexp(1.0f, -8), DType::BF16), 1.0);  // tie -> even
  EXPECT_EQ(host_round_trip(1.0f + 3 * std::ldexp(1.0f, -8), DType::BF16), 1.0 + std::ldexp(1.0, -6));  // tie -> even (up)
  EXPECT_EQ(host_round_trip(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), DType::BF16), 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(host_round_trip(-3.5f, DType::BF16), -3.5);
  EXPECT_TRUE(std::isnan(host_round_trip(std::nanf(""), DType::BF16)));
  EXPECT_TRUE(std::isinf(host_round_trip(from_bits(0x7f800000u), DType::BF16)));
  // f16: 11 significant bits, max 65504, subnormals down to 2^-24.
  EXPECT_EQ(host_round_trip(1.0f + std::ldexp(1.0f, -11), DType::F16), 1.0);  // tie -> even
  EXPECT_EQ(host_round_trip(1.0f + 3 * std::ldexp(1.0f, -11), DType::F16), 1.0 + std::ldexp(1.0, -9));
  EXPECT_EQ(host_round_trip(65504.0f, DType::F16), 65504.0);
  EXPECT_EQ(host_round_trip(65519.0f, DType::F16), 65504.0);
  EXPECT_TRUE(std::isinf(host_round_trip(65520.0f, DType::F16)));
  EXPECT_EQ(host_round_trip(std::ldexp(1.0f, -24), DType::F16), std::ldexp(1.0, -24));
  EXPECT_EQ(host_round_trip(1.5f * std::ldexp(1.0f, -24), DType::F16), std::ldexp(1.0, -23));  // tie -> even
  EXPECT_EQ(host_round_trip(1e-8f, DType::F16), 0.0);
  EXPECT_EQ(host_round_trip(std::ldexp(1.0f, -14), DType::F16), std::ldexp(1.0, -14));  // smallest normal
  EXPECT_EQ(host_round_trip(std::ldexp(-1638.0f, -14), DType::F16), std::ldexp(-1638.0, -14));  // exact in f16
  EXPECT_TRUE(std::isnan(host_round_trip(std::nanf(""), DType::F16)));
  // fill and element access of half tensors on the host.
  Tensor b = Tensor::full({4}, 2.75, DType::BF16);
  EXPECT_EQ(b.at(3), 2.75);
  Tensor h = Tensor::full({2}, -1.5, DType::F16);
  EXPECT_EQ(h.at(1), -1.5);
  EXPECT_EQ(Tensor::full({2}, 7, DType::I64).to_dtype(DType::BF16).at(0), 7.0);
}

TEST(TensorPinned, FallsBackToOrdinaryHostMemoryWithoutAGpu) {
  Tensor t = Tensor::empty_pinned({16}, DType::F32);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(t.is_pinned(), cuda_device_count() > 0);
  t.fill(3.0);
  EXPECT_EQ(t.at(15), 3.0);
}

// ---- on a GPU ----------------------------------------------------------------------------

const DType kAllDtypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::U8, DType::I32, DType::I64};

// Host tensor of n elements whose values are exact in every dtype (small integers and halves).
Tensor exact_values(int64_t n, DType dt) {
  Tensor f = Tensor::empty({n}, DType::F64);
  for (int64_t i = 0; i < n; ++i) f.data<double>()[i] = (dt == DType::U8 || dt == DType::I32 || dt == DType::I64)
                                                           ? static_cast<double>(i % 200)
                                                           : 0.5 * static_cast<double>(i % 97) - 20.0;
  return f.to_dtype(dt);
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  EXPECT_EQ(std::memcmp(ha.raw(), hb.raw(), ha.nbytes()), 0) << what;
}

TEST(GpuTensor, CopiesRoundTripEveryDtype) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const Stream s = compute_stream(gpu);
  EXPECT_TRUE(s.valid());
  EXPECT_EQ(s.handle, compute_stream(gpu).handle);  // one compute stream per device
  for (DType dt : kAllDtypes) {
    const std::string what = dtype_name(dt);
    const Tensor host = exact_values(1001, dt);  // odd size
    // Synchronous, pageable.
    Tensor d = host.to(gpu);
    EXPECT_TRUE(d.device().is_cuda());
    expect_same_bytes(d.to(Device::cpu()), host, what + " pageable");
    // Asynchronous, pinned both ways.
    Tensor pin = Tensor::empty_pinned(host.shape(), dt);
    EXPECT_TRUE(pin.is_pinned());
    pin.copy_from(host);
    Tensor d2 = Tensor::empty(host.shape(), dt, gpu);
    d2.copy_from(pin, s);
    Tensor back = Tensor::empty_pinned(host.shape(), dt);
    back.copy_from(d2, s);
    synchronize(s);
    expect_same_bytes(back, host, what + " pinned async");
    // Device clone, device-to-device copy of a row slice, element access.
    Tensor c = d.clone();
    expect_same_bytes(c, host, what + " clone");
    Tensor rows = d.view({7, 143}).slice0(2, 5);
    Tensor r2 = Tensor::empty({3, 143}, dt, gpu);
    r2.copy_from(rows);
    expect_same_bytes(r2, host.view({7, 143}).slice0(2, 5).clone(), what + " slice copy");
    EXPECT_EQ(d.at(1000), host.at(1000)) << what;
  }
}

TEST(GpuTensor, FillZeroAndConvertMatchTheHost) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (DType dt : kAllDtypes) {
    Tensor t = Tensor::full({33}, 3.0, dt, gpu);
    EXPECT_EQ(t.at(32), 3.0) << dtype_name(dt);
    t.zero();
    EXPECT_EQ(t.at(7), 0.0) << dtype_name(dt);
  }
  // f32 -> every dtype on the device equals the host conversion bit for bit (RNE).
  Tensor f = Tensor::empty({4096}, DType::F32);
  CounterRng rng(5, "test/convert");
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = static_cast<float>(rng.normal(i) * 300.0);
  f.data<float>()[0] = 1.0f + std::ldexp(1.0f, -8);  // bf16 tie
  f.data<float>()[1] = 1.0f + std::ldexp(1.0f, -11);  // f16 tie
  f.data<float>()[2] = 70000.0f;                      // f16 overflow
  f.data<float>()[3] = 3e-8f;                         // f16 subnormal
  const Tensor fd = f.to(gpu);
  for (DType dt : {DType::BF16, DType::F16, DType::F64}) {
    expect_same_bytes(fd.to_dtype(dt), f.to_dtype(dt), std::string("f32 -> ") + dtype_name(dt));
    expect_same_bytes(fd.to_dtype(dt).to_dtype(DType::F32), f.to_dtype(dt).to_dtype(DType::F32),
                      std::string(dtype_name(dt)) + " -> f32");
  }
}

TEST(GpuAllocator, ReusesBlocksAndTracksCurrentAndPeak) {
  SKIP_WITHOUT_GPU();
  CudaCachingAllocator& a = cuda_allocator(0);
  EXPECT_EQ(&allocator_for(Device::cuda(0)), static_cast<Allocator*>(&a));
  const size_t base = a.current_bytes();
  a.reset_peak();
  void* p1 = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::F32, Device::cuda(0));  // 4 MiB
    p1 = t.raw();
    EXPECT_GE(a.current_bytes(), base + (4u << 20));
    EXPECT_GE(a.reserved_bytes(), a.current_bytes());
  }
  EXPECT_EQ(a.current_bytes(), base);
  EXPECT_GE(a.peak_bytes(), base + (4u << 20));
  const int64_t mallocs = a.malloc_calls();
  Tensor t2 = Tensor::empty({1 << 20}, DType::F32, Device::cuda(0));
  EXPECT_EQ(t2.raw(), p1);  // served from the cache
  EXPECT_EQ(a.malloc_calls(), mallocs);
  EXPECT_GE(a.cached_bytes(), 0u);
}

TEST(GpuAllocator, OutOfMemoryIsOneClearMessage) {
  SKIP_WITHOUT_GPU();
  const std::string layer = "features.0.proj_bn.0";
  ErrorKind k{};
  const std::string msg = error_of(
      [&] {
        CudaAllocLabel label("conv2d forward", &layer);
        Tensor huge = Tensor::empty({int64_t{1} << 48}, DType::F32, Device::cuda(0));  // 1 PiB
      },
      &k);
  ASSERT_FALSE(msg.empty());
  EXPECT_EQ(k, ErrorKind::Library);
  for (const char* want : {"out of GPU memory on cuda:0", "rank", "allocating", "conv2d forward 'features.0.proj_bn.0'",
                           "free of", "spikemesh holds"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  // The device is still usable afterwards.
  Tensor ok = Tensor::full({8}, 1.0, DType::F32, Device::cuda(0));
  EXPECT_EQ(ok.at(7), 1.0);
}

const char* kTinyCsnnVars = "C=4";

TEST(GpuAllocator, NoCudaMallocInTheSteadyStateOfATrainingStep) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  ModelOverrides ov;
  ov.vars["C"] = 4;
  ov.T = 2;
  auto m = load_builtin_model("fmnist_csnn", ov);
  (void)kTinyCsnnVars;
  m->finalize(DType::F32, gpu, 3);  // the loss runs on the device
  OptimizerConfig oc;
  oc.name = "adam";
  auto opt = make_optimizer_cuda(oc, m->params());
  const int T = 2, N = 3;
  Tensor x = Tensor::empty({T, N, 1, 28, 28}, DType::F32);
  CounterRng rng(1, "test/x");
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng.uniform(i) * 2.0);
  x = x.to(gpu);
  Tensor y = Tensor::full({N}, 3, DType::I64).to(gpu);
  CudaCachingAllocator& a = cuda_allocator(0);
  auto step = [&](int64_t s) {
    Ctx ctx;
    ctx.step = s;
    m->reset_state();
    m->zero_grad();
    Tensor out = m->forward(x, ctx);
    m->loss->forward(out, y);
    m->backward(m->loss->backward(1.0), ctx);
    opt->step();
    synchronize(gpu);
  };
  step(0);
  step(1);
  const int64_t mallocs = a.malloc_calls();
  const size_t current = a.current_bytes();
  a.reset_peak();
  for (int s = 2; s < 5; ++s) step(s);
  EXPECT_EQ(a.malloc_calls(), mallocs) << "cudaMalloc in the steady state";
  EXPECT_EQ(a.current_bytes(), current);
  EXPECT_GT(a.peak_bytes(), current);  // activations were allocated during the steps
}

}  // namespace
}  // namespace sm
