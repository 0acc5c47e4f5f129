// test_gpu_kernels.cpp — cuDNN convolutions (Conv2d, Conv1d) and cuBLAS GEMMs (Linear) on the
// GPU against the CPU layers on random inputs, odd shapes included: forward, input gradient
// and every parameter gradient, f32 to 1e-5 relative (TF32 is off unless asked), bf16 to
// 2e-2; spike (binary) inputs take the bit-packed path; split B/W equals the fused backward.
// Also the row-major GEMM wrapper against a naive double product. Skipped without a GPU.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/linear.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cuda/conv_cudnn.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#endif

namespace sm {
namespace {

using gputest::compare_layer;
using gputest::LayerCheck;
using gputest::make_units;

struct ConvCase {
  Shape x;  // [T, N, Cin, H, W]
  int cout, kernel, stride, padding;
  bool bias, binary;
};

std::function<LayerPtr()> conv2d_maker(const ConvCase& c) {
  return [c]() {
    Conv2dConfig cfg;
    cfg.in_channels = static_cast<int>(c.x[2]);
    cfg.out_channels = c.cout;
    cfg.kernel = c.kernel;
    cfg.stride = c.stride;
    cfg.padding = c.padding;
    cfg.bias = c.bias;
    return LayerPtr(std::make_unique<Conv2d>(cfg));
  };
}

const ConvCase kConvCases[] = {
    {{2, 3, 3, 7, 5}, 5, 3, 2, 1, true, false},     // odd sizes, stride 2
    {{1, 1, 1, 4, 4}, 1, 1, 1, 0, false, false},    // 1x1 everything
    {{2, 2, 4, 9, 9}, 6, 5, 1, 2, true, false},     // 5x5 kernel
    {{1, 2, 8, 12, 10}, 16, 3, 1, 1, false, true},  // spike input: saved as bits
    {{2, 4, 16, 24, 24}, 32, 3, 1, 1, true, false}, // CIFAR10-DVS-like block
};

TEST(GpuConv2d, MatchesCpuLayerInF32) {
  SKIP_WITHOUT_GPU();
  for (const ConvCase& c : kConvCases) {
    auto u = make_units(conv2d_maker(c));
    LayerCheck chk;
    chk.binary_input = c.binary;
    EXPECT_EQ(compare_layer(u, c.x, chk), "") << "conv2d x " << shape_str(c.x) << " -> " << c.cout << " k"
                                               << c.kernel << " s" << c.stride << " p" << c.padding;
  }
}

TEST(GpuConv2d, MatchesCpuLayerInBf16AndF16) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::BF16, DType::F16})
    for (const ConvCase& c : kConvCases) {
      auto u = make_units(conv2d_maker(c));
      LayerCheck chk;
      chk.gpu_dtype = dt;
      chk.tol = dt == DType::BF16 ? 2e-2 : 5e-3;
      chk.binary_input = c.binary;
      chk.check_split = false;
      EXPECT_EQ(compare_layer(u, c.x, chk), "") << dtype_name(dt) << " conv2d x " << shape_str(c.x);
    }
}

TEST(GpuConv1d, MatchesCpuLayer) {
  SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;  // [T, N, Cin, L]
    int cout;
    bool bias, binary;
  };
  for (const Case& c : {Case{{2, 3, 6, 11}, 5, true, false}, Case{{1, 2, 8, 16}, 4, false, true},
                        Case{{1, 1, 1, 1}, 1, true, false}}) {
    auto make = [c]() {
      Conv1dConfig cfg;
      cfg.in_channels = static_cast<int>(c.x[2]);
      cfg.out_channels = c.cout;
      cfg.bias = c.bias;
      return LayerPtr(std::make_unique<Conv1d>(cfg));
    };
    for (DType dt : {DType::F32, DType::BF16}) {
      // The one-element case checks indexing; in bf16 its single output is a sum (w·x + b)
      // that may cancel, so a relative bound on it measures the cancellation, not the layer.
      if (dt == DType::BF16 && c.x[3] == 1) continue;
      auto u = make_units(make);
      LayerCheck chk;
      chk.gpu_dtype = dt;
      chk.tol = dt == DType::F32 ? 1e-5 : 2e-2;
      chk.binary_input = c.binary;
      EXPECT_EQ(compare_layer(u, c.x, chk), "") << dtype_name(dt) << " conv1d x " << shape_str(c.x);
    }
  }
}

TEST(GpuLinear, MatchesCpuLayer) {
  SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;  // [T, N, ..., Fin]
    int fout;
    bool bias, binary;
  };
  for (const Case& c : {Case{{2, 3, 7}, 5, true, false}, Case{{1, 1, 1}, 1, false, false},
                        Case{{3, 5, 33}, 17, true, false}, Case{{2, 4, 64}, 10, true, true},
                        Case{{2, 3, 4, 12}, 9, true, false}, Case{{2, 8, 784}, 128, false, true}}) {
    auto make = [c]() {
      LinearConfig cfg;
      cfg.in_features = static_cast<int>(c.x.back());
      cfg.out_features = c.fout;
      cfg.bias = c.bias;
      return LayerPtr(std::make_unique<Linear>(cfg));
    };
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      auto u = make_units(make);
      LayerCheck chk;
      chk.gpu_dtype = dt;
      chk.tol = dt == DType::F32 ? 1e-5 : dt == DType::BF16 ? 2e-2 : 5e-3;
      chk.binary_input = c.binary;
      EXPECT_EQ(compare_layer(u, c.x, chk), "") << dtype_name(dt) << " linear x " << shape_str(c.x) << " -> "
                                                 << c.fout;
    }
  }
}

#ifdef SPIKEMESH_HAVE_CUDA
// gemm(): every transpose combination and a leading dimension larger than the row, against a
// naive double product. A [m, k] (or [k, m] transposed), B [k, n] (or [n, k]).
TEST(GpuGemm, RowMajorTransposesAndLeadingDims) {
  SKIP_WITHOUT_GPU();
  const int64_t m = 5, n = 7, k = 3, pad = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      const int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
      Tensor A = gputest::random_input({ar, lda}, 1), B = gputest::random_input({br, ldb}, 2);
      Tensor C = gputest::random_input({m, ldc}, 3);
      Tensor Cd = C.to(gputest::gpu());
      cuda::gemm(0, ta, tb, m, n, k, 2.0, A.to(gputest::gpu()).raw(), lda, B.to(gputest::gpu()).raw(), ldb,
                 DType::F32, 0.5, Cd.raw(), ldc, DType::F32);
      const Tensor got = Cd.to(Device::cpu());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          double want = C.at(i * ldc + j);
          if (j < n) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) {
              const double a = ta ? A.at(p * lda + i) : A.at(i * lda + p);
              const double b = tb ? B.at(j * ldb + p) : B.at(p * ldb + j);
              acc += a * b;
            }
            want = 2.0 * acc + 0.5 * want;
          }
          EXPECT_NEAR(got.at(i * ldc + j), want, 1e-5) << "ta " << ta << " tb " << tb << " at " << i << "," << j;
        }
    }
}

// Largest |got - want| against the largest |want|, as "" or a message naming `what`.
std::string max_error_within(const Tensor& got, const std::vector<double>& want, double rel, const char* what) {
  double scale = 0.0, err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    err = std::max(err, std::abs(got.at(static_cast<int64_t>(i)) - want[i]));
  }
  if (err <= rel * scale) return "";
  return std::string(what) + ": max error " + std::to_string(err) + " of scale " + std::to_string(scale);
}

// One policy on a VGG-like 3x3 shape: forward, data and filter gradients against a naive
// double convolution, to 1e-4 relative of the largest value; "" when all three agree.
std::string conv_policy_error(const cuda::ConvOptions& opt) {
  cpu::Conv2dGeometry g;
  g.batch = 8, g.in_channels = 32, g.height = 24, g.width = 24, g.out_channels = 32, g.kernel = 3, g.stride = 1,
  g.padding = 1;
  const int64_t N = g.batch, C = g.in_channels, H = g.height, W = g.width, F = g.out_channels;
  Tensor x = gputest::random_input({N, C, H, W}, 11);   // [N, Cin, H, W]
  Tensor w = gputest::random_input({F, C, 3, 3}, 12);   // [Cout, Cin, 3, 3]
  Tensor dy = gputest::random_input({N, F, H, W}, 13);  // [N, Cout, H, W]
  Tensor xd = x.to(gputest::gpu()), wd = w.to(gputest::gpu()), dyd = dy.to(gputest::gpu());
  Tensor y = Tensor::zeros(dy.shape(), DType::F32, gputest::gpu());
  Tensor dx = Tensor::zeros(x.shape(), DType::F32, gputest::gpu());
  Tensor dw = Tensor::zeros(w.shape(), DType::F32, gputest::gpu());
  cuda::conv2d_forward_cudnn(0, g, DType::F32, xd.raw(), wd.raw(), y.raw(), opt);
  cuda::conv2d_backward_data_cudnn(0, g, DType::F32, dyd.raw(), wd.raw(), dx.raw(), opt);
  cuda::conv2d_backward_filter_cudnn(0, g, DType::F32, xd.raw(), dyd.raw(), dw.raw(), 0.0, opt);
  std::vector<double> want_y(dy.numel(), 0.0), want_dx(x.numel(), 0.0), want_dw(w.numel(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t a = 0; a < 3; ++a)
              for (int64_t b = 0; b < 3; ++b) {
                const int64_t r = i + a - 1, q = j + b - 1;
                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                const int64_t xi = ((n * C + c) * H + r) * W + q, wi = ((f * C + c) * 3 + a) * 3 + b;
                const int64_t yi = ((n * F + f) * H + i) * W + j;
                want_y[yi] += double(x.at(xi)) * w.at(wi);
                want_dx[xi] += double(dy.at(yi)) * w.at(wi);
                want_dw[wi] += double(dy.at(yi)) * x.at(xi);
              }
  return max_error_within(y.to(Device::cpu()), want_y, 1e-4, "forward") +
         max_error_within(dx.to(Device::cpu()), want_dx, 1e-4, " backward data") +
         max_error_within(dw.to(Device::cpu()), want_dw, 1e-4, " backward filter");
}

// The fast and tuned policies (allow_imprecise: FFT/Winograd and non-deterministic algorithms
// allowed, TF32 still off; tuned: ranked by cudnnFind* timings) stay within f32 tolerance, and
// f32 still runs FMA math (no TF32) under every one of them.
TEST(GpuConv2d, FastAndTunedPoliciesStayWithinF32Tolerance) {
  SKIP_WITHOUT_GPU();
  for (const auto& [imprecise, tuned] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    cuda::ConvOptions opt;
    opt.allow_imprecise = imprecise;
    opt.tuned = tuned;
    EXPECT_EQ(conv_policy_error(opt), "") << (imprecise ? "fast" : "exact") << (tuned ? "-tuned" : "");
  }
  for (const std::string& line : cuda::conv_plan_summary()) {
    if (line.find("f32 [8, 32, 24, 24] -> 32 k3 s1 p1") != std::string::npos) {
      EXPECT_NE(line.find("fma"), std::string::npos) << line;
    }
  }
}

TEST(GpuConv2d, AlgorithmChosenOncePerShapeAndStrictF32UsesFma) {
  SKIP_WITHOUT_GPU();
  auto u = make_units(conv2d_maker(kConvCases[0]));
  LayerCheck chk;
  ASSERT_EQ(compare_layer(u, kConvCases[0].x, chk), "");
  const size_t plans = cuda::conv_plan_summary().size();
  ASSERT_EQ(compare_layer(u, kConvCases[0].x, chk), "");
  EXPECT_EQ(cuda::conv_plan_summary().size(), plans);  // no new choices for a known shape
  bool found = false;
  for (const std::string& line : cuda::conv_plan_summary())
    if (line.find("f32 [6, 3, 7, 5] -> 5 k3 s2 p1") != std::string::npos) {
      found = true;
      EXPECT_NE(line.find("fma"), std::string::npos) << line;  // no TF32 in f32
    }
  EXPECT_TRUE(found);
}
#endif

}  // namespace
}  // namespace sm
