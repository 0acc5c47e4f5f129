// test_gpu_conv_graph.cpp — cuDNN convolutions through the graph API and the forced legacy API
// against the naive double reference (tests/ref/conv_ref.h) in all three directions: every
// policy in f32 IEEE within 1e-5 of the largest reference value (1e-4 where the engine that
// ran is an FFT/Winograd one, which only the transform-allowing policies admit), TF32 within
// 1e-2, bf16 (NCHW and NHWC) within 2e-2; dw_beta accumulation; a proof that TF32 is on under
// tf32 and off under ieee (an input whose product is exact in IEEE and rounded in TF32); plans
// made once per shape. Skipped without a GPU.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../ref/conv_ref.h"
#include "conv_test_util.h"
#include "gpu_test_util.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/conv_policy.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cuda/conv_cudnn.h"
#include "spikemesh/kernels/cuda/conv_cudnn_graph.h"
#endif

namespace sm {
namespace {

#ifdef SPIKEMESH_HAVE_CUDA
using cuda::ConvApi;
using cuda::ConvLayout;
using cuda::ConvOptions;
using ref::ConvRefShape;

ConvOptions options_of(const char* policy, ConvApi api, Fp32Precision p = Fp32Precision::IEEE) {
  GpuNumerics n;
  n.conv = conv_policy_from_name(policy);
  n.conv_fp32 = p;
  ConvOptions o = cuda::conv_options_of(n);
  o.api = api;
  return o;
}

// NCHW <-> NHWC of a [n, c, h, w] array (NHWC: [n, h, w, c]).
std::vector<double> permute(const std::vector<double>& v, int64_t n, int64_t c, int64_t h, int64_t w, bool to_nhwc) {
  std::vector<double> out(v.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < c; ++b)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) {
          const int64_t nchw = ((a * c + b) * h + i) * w + j, nhwc = ((a * h + i) * w + j) * c + b;
          if (to_nhwc) out[nhwc] = v[nchw];
          else out[nchw] = v[nhwc];
        }
  return out;
}

// Host NCHW values -> a device tensor in dt and layout.
Tensor upload(const std::vector<double>& v, const std::array<int64_t, 4>& d, DType dt, ConvLayout l) {
  const std::vector<double> src = l == ConvLayout::NHWC ? permute(v, d[0], d[1], d[2], d[3], true) : v;
  Tensor t = Tensor::empty({static_cast<int64_t>(src.size())}, DType::F32);
  for (size_t i = 0; i < src.size(); ++i) t.data<float>()[i] = static_cast<float>(src[i]);
  return t.to(gputest::gpu()).to_dtype(dt);
}

// A device tensor in dt and layout -> host NCHW values.
std::vector<double> download(const Tensor& t, const std::array<int64_t, 4>& d, ConvLayout l) {
  const Tensor h = t.to_dtype(DType::F32).to(Device::cpu());
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = h.data<float>()[i];
  return l == ConvLayout::NHWC ? permute(v, d[0], d[1], d[2], d[3], false) : v;
}

// Uniform values in [-1, 1), rounded to dt (so that the reference sees the GPU's inputs).
std::vector<double> random_values(int64_t n, uint64_t seed, DType dt) {
  const Tensor r = gputest::random_input({n}, seed).to_dtype(dt).to_dtype(DType::F32);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = r.data<float>()[i];
  return v;
}

// "" when max |got - want| <= rel · max |want|, otherwise a message naming `what`.
std::string within(const std::vector<double>& got, const std::vector<double>& want, double rel, const std::string& what) {
  double scale = 0.0, err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    err = std::max(err, std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - want[i]));
  }
  if (got.size() == want.size() && err <= rel * scale) return "";
  return what + ": max error " + std::to_string(err) + " of scale " + std::to_string(scale) + " (bound " +
         std::to_string(rel) + " relative); ";
}

struct Dims {
  std::array<int64_t, 4> x, w, y;
};
Dims dims_of(const ConvRefShape& s) {
  return {{s.n, s.cin, s.h, s.w}, {s.cout, s.cin, s.k, s.k}, {s.n, s.cout, s.ho(), s.wo()}};
}

// The engine in use for a direction names a transform (FFT or Winograd) in its notes.
bool ran_transform(cuda::ConvDirection dir, const ConvRefShape& s, DType dt, const ConvOptions& o, double beta) {
  const std::string c = cuda::conv_graph_choice(dir, 0, test::geometry_of(s), dt, o, beta);
  return c.find("fft") != std::string::npos || c.find("winograd") != std::string::npos;
}

// Forward, data gradient and weight gradient (dw = beta·dw0 + ∂L/∂w) of shape s in dt with
// options o, against the double reference; "" when all three are within `rel` (f32 IEEE
// direct engines: `rel`; an FFT/Winograd engine: at least 1e-4).
std::string check_directions(const ConvRefShape& s, DType dt, const ConvOptions& o, double rel, double beta = 0.0,
                             uint64_t seed = 1) {
  const cpu::Conv2dGeometry g = test::geometry_of(s);
  const Dims d = dims_of(s);
  const std::vector<double> x = random_values(g.input_numel(), seed, dt), w = random_values(g.weight_numel(), seed + 1, dt),
                            dy = random_values(g.output_numel(), seed + 2, dt),
                            dw0 = random_values(g.weight_numel(), seed + 3, dt);
  Tensor xd = upload(x, d.x, dt, o.layout), wd = upload(w, d.w, dt, o.layout), dyd = upload(dy, d.y, dt, o.layout);
  Tensor y = Tensor::zeros({g.output_numel()}, dt, gputest::gpu());
  Tensor dx = Tensor::zeros({g.input_numel()}, dt, gputest::gpu());
  Tensor dw = upload(dw0, d.w, dt, o.layout);
  cuda::conv2d_forward_cudnn(0, g, dt, xd.raw(), wd.raw(), y.raw(), o);
  cuda::conv2d_backward_data_cudnn(0, g, dt, dyd.raw(), wd.raw(), dx.raw(), o);
  cuda::conv2d_backward_filter_cudnn(0, g, dt, xd.raw(), dyd.raw(), dw.raw(), beta, o);
  std::vector<double> want_dw = ref::conv2d_backward_weights(s, x, dy);
  for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += beta * dw0[i];
  const bool graph = o.api != ConvApi::Legacy;
  auto bound = [&](cuda::ConvDirection dir) {
    return graph && ran_transform(dir, s, dt, o, beta) ? std::max(rel, 1e-4) : rel;
  };
  std::string engines;  // f32 IEEE on the graph API: no engine in use may be a tensor-core one
  for (cuda::ConvDirection dir :
       {cuda::ConvDirection::Forward, cuda::ConvDirection::BackwardData, cuda::ConvDirection::BackwardFilter}) {
    const std::string c = cuda::conv_graph_choice(dir, 0, g, dt, o, beta);
    if (graph && dt == DType::F32 && !o.allow_tf32 && c.find("tensor-core") != std::string::npos)
      engines += std::string("TF32 engine under ieee: ") + c + "; ";
  }
  return engines + within(download(y, d.y, o.layout), ref::conv2d_forward(s, x, w, {}), bound(cuda::ConvDirection::Forward),
                "forward") +
         within(download(dx, d.x, o.layout), ref::conv2d_backward_data(s, dy, w),
                bound(cuda::ConvDirection::BackwardData), "backward data") +
         within(download(dw, d.w, o.layout), want_dw, bound(cuda::ConvDirection::BackwardFilter), "backward filter");
}

const ConvRefShape kShapes[] = {
    {2, 3, 7, 5, 5, 3, 2, 1},     // odd sizes, stride 2
    {4, 16, 6, 6, 8, 1, 1, 0},    // 1x1
    {2, 4, 9, 9, 6, 5, 1, 2},     // 5x5 kernel
    {8, 32, 24, 24, 32, 3, 1, 1}, // CIFAR10-DVS-like block
};

std::string shape_text(const ConvRefShape& s) {
  return "[" + std::to_string(s.n) + "," + std::to_string(s.cin) + "," + std::to_string(s.h) + "," +
         std::to_string(s.w) + "]->" + std::to_string(s.cout) + " k" + std::to_string(s.k) + " s" +
         std::to_string(s.stride) + " p" + std::to_string(s.pad);
}

const char* const kPolicies[] = {"exact", "exact-tuned", "deterministic", "deterministic-tuned", "fast", "fast-tuned"};

TEST(GpuConvGraph, EveryPolicyMatchesDoubleReferenceInF32Ieee) {
  SKIP_WITHOUT_GPU();
  for (const char* policy : kPolicies)
    for (const ConvRefShape& s : kShapes)
      EXPECT_EQ(check_directions(s, DType::F32, options_of(policy, ConvApi::Graph), 1e-5), "")
          << policy << " " << shape_text(s);
}

TEST(GpuConvGraph, Tf32PoliciesWithinTf32Tolerance) {
  SKIP_WITHOUT_GPU();
  for (const char* policy : {"exact", "deterministic-tuned", "fast-tuned"})
    for (const ConvRefShape& s : kShapes)
      EXPECT_EQ(check_directions(s, DType::F32, options_of(policy, ConvApi::Graph, Fp32Precision::TF32), 1e-2), "")
          << policy << " tf32 " << shape_text(s);
}

TEST(GpuConvGraph, LegacyFallbackForcedMatchesDoubleReference) {
  SKIP_WITHOUT_GPU();
  const ConvRefShape s{3, 5, 11, 9, 7, 3, 1, 1};  // a shape no other test plans
  for (const char* policy : {"exact", "exact-tuned"})
    EXPECT_EQ(check_directions(s, DType::F32, options_of(policy, ConvApi::Legacy), 1e-5, 1.0), "") << policy;
  EXPECT_EQ(check_directions(s, DType::F32, options_of("fast", ConvApi::Legacy, Fp32Precision::TF32), 1e-2), "");
  int legacy_lines = 0;
  for (const std::string& line : cuda::conv_plan_summary()) {
    if (line.find("f32 [3, 5, 11, 9] -> 7 k3 s1 p1") == std::string::npos) continue;
    EXPECT_NE(line.rfind("graph ", 0), 0u) << "the legacy API was forced: " << line;
    ++legacy_lines;
  }
  EXPECT_GE(legacy_lines, 3);  // forward, data and filter gradient at least
}

TEST(GpuConvGraph, AccumulatesIntoTheWeightGradient) {
  SKIP_WITHOUT_GPU();
  const ConvRefShape s{4, 8, 10, 10, 12, 3, 1, 1};
  for (double beta : {1.0, 0.5})
    for (ConvApi api : {ConvApi::Graph, ConvApi::Legacy})
      EXPECT_EQ(check_directions(s, DType::F32, options_of("exact", api), 1e-5, beta, 7), "")
          << "beta " << beta << " " << cuda::conv_api_name(api);
}

TEST(GpuConvGraph, Bf16AndF32InBothLayouts) {
  SKIP_WITHOUT_GPU();
  for (ConvLayout l : {ConvLayout::NCHW, ConvLayout::NHWC})
    for (const ConvRefShape& s : kShapes) {
      ConvOptions o = options_of("exact", ConvApi::Graph);
      o.layout = l;
      EXPECT_EQ(check_directions(s, DType::BF16, o, 2e-2), "") << "bf16 " << cuda::conv_layout_name(l) << shape_text(s);
      EXPECT_EQ(check_directions(s, DType::F32, o, 1e-5), "") << "f32 " << cuda::conv_layout_name(l) << shape_text(s);
      if (l == ConvLayout::NCHW) {  // the legacy API in bf16 (channels-last there is not a path the layers take)
        o.api = ConvApi::Legacy;
        EXPECT_EQ(check_directions(s, DType::BF16, o, 2e-2), "") << "legacy bf16 " << shape_text(s);
      }
    }
}

TEST(GpuConvGraph, AutoRunsTheGraphApiAndPlansOncePerShape) {
  SKIP_WITHOUT_GPU();
  std::string why;
  if (!cuda::cudnn_graph_api_usable(&why)) GTEST_SKIP() << why;
  const ConvRefShape s{2, 6, 8, 8, 10, 3, 1, 1};
  const ConvOptions o = options_of("exact", ConvApi::Auto);
  ASSERT_EQ(check_directions(s, DType::F32, o, 1e-5), "");
  const size_t lines = cuda::conv_plan_summary().size();
  ASSERT_EQ(check_directions(s, DType::F32, o, 1e-5, 0.0, 99), "");
  EXPECT_EQ(cuda::conv_plan_summary().size(), lines);  // no new plans for a known shape
  int graph_lines = 0;
  for (const std::string& line : cuda::conv_plan_summary())
    if (line.find("f32 [2, 6, 8, 8] -> 10 k3 s1 p1:") != std::string::npos) {
      EXPECT_EQ(line.rfind("graph ", 0), 0u) << line;
      EXPECT_NE(line.find("engine "), std::string::npos) << line;
      EXPECT_NE(line.find(" fma,"), std::string::npos) << line;
      ++graph_lines;
    }
  EXPECT_EQ(graph_lines, 3);
  for (cuda::ConvDirection dir :
       {cuda::ConvDirection::Forward, cuda::ConvDirection::BackwardData, cuda::ConvDirection::BackwardFilter})
    EXPECT_NE(cuda::conv_graph_choice(dir, 0, test::geometry_of(s), DType::F32, o, 0.0), "")
        << cuda::conv_direction_name(dir);
}

// TF32 keeps 10 mantissa bits: 1 + 2^-20 becomes 1. With one non-zero weight (or one non-zero
// output gradient) every output is a single product with 1, so IEEE gives 1 + 2^-20 exactly
// and TF32 gives 1 exactly, in each direction, whatever the engine's summation order.
struct Tf32Outcome {
  int exact = 0, rounded = 0, other = 0;  // outputs 1 + 2^-20, 1, anything else (where non-zero is expected)
  int stray = 0;                          // non-zero where zero is expected
};

void tally(const Tensor& t, const std::vector<bool>& expect_one, Tf32Outcome& r) {
  const Tensor h = t.to(Device::cpu());
  const float one_plus = 1.0f + std::ldexp(1.0f, -20);
  for (int64_t i = 0; i < h.numel(); ++i) {
    const float v = h.data<float>()[i];
    if (!expect_one[static_cast<size_t>(i)]) {
      r.stray += v != 0.0f;
      continue;
    }
    if (std::memcmp(&v, &one_plus, sizeof v) == 0) ++r.exact;
    else if (v == 1.0f) ++r.rounded;
    else ++r.other;
  }
}

// The three directions' outcomes under options o on a shape large enough for tensor-core engines.
std::vector<Tf32Outcome> tf32_probe(const ConvOptions& o) {
  cpu::Conv2dGeometry g;
  g.batch = 16, g.in_channels = 64, g.height = 16, g.width = 16, g.out_channels = 64, g.kernel = 3, g.padding = 1;
  const int64_t N = g.batch, C = g.in_channels, H = g.height, W = g.width, F = g.out_channels;
  const double v = 1.0 + std::ldexp(1.0, -20);
  auto device = [](const std::vector<double>& h) {
    Tensor t = Tensor::empty({static_cast<int64_t>(h.size())}, DType::F32);
    for (size_t i = 0; i < h.size(); ++i) t.data<float>()[i] = static_cast<float>(h[i]);
    return t.to(gputest::gpu());
  };
  std::vector<double> x(g.input_numel(), v), w(g.weight_numel(), 0.0), dy(g.output_numel(), v), dy1(g.output_numel(), 0.0);
  w[((0 * C + 0) * 3 + 1) * 3 + 1] = 1.0;  // w[f 0, c 0, centre] = 1
  const int64_t hc = 5, wc = 7;
  dy1[(0 * F + 0) * H * W + hc * W + wc] = 1.0;  // one output gradient at n 0, f 0, (5, 7)
  Tensor xd = device(x), wd = device(w), dyd = device(dy), dy1d = device(dy1);
  Tensor y = Tensor::zeros({g.output_numel()}, DType::F32, gputest::gpu());
  Tensor dx = Tensor::zeros({g.input_numel()}, DType::F32, gputest::gpu());
  Tensor dw = Tensor::zeros({g.weight_numel()}, DType::F32, gputest::gpu());
  cuda::conv2d_forward_cudnn(0, g, DType::F32, xd.raw(), wd.raw(), y.raw(), o);
  cuda::conv2d_backward_data_cudnn(0, g, DType::F32, dyd.raw(), wd.raw(), dx.raw(), o);
  cuda::conv2d_backward_filter_cudnn(0, g, DType::F32, xd.raw(), dy1d.raw(), dw.raw(), 0.0, o);
  std::vector<Tf32Outcome> r(3);
  std::vector<bool> y_one(g.output_numel()), dx_one(g.input_numel()), dw_one(g.weight_numel());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < H * W; ++i) y_one[(n * F + 0) * H * W + i] = dx_one[(n * C + 0) * H * W + i] = true;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < 9; ++k) dw_one[(0 * C + c) * 9 + k] = true;  // dw[0, c, a, b] = x[0, c, 4 + a, 6 + b]
  tally(y, y_one, r[0]);
  tally(dx, dx_one, r[1]);
  tally(dw, dw_one, r[2]);
  return r;
}

TEST(GpuConvGraph, Tf32IsOnUnderTf32AndOffUnderIeee) {
  SKIP_WITHOUT_GPU();
  const char* dirs[] = {"forward", "backward data", "backward filter"};
  const int expected[] = {16 * 16 * 16, 16 * 16 * 16, 64 * 9};
  for (ConvApi api : {ConvApi::Graph, ConvApi::Legacy}) {
    const std::vector<Tf32Outcome> ieee = tf32_probe(options_of("exact", api, Fp32Precision::IEEE));
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(ieee[d].exact, expected[d]) << "ieee " << cuda::conv_api_name(api) << " " << dirs[d]
                                            << ": TF32 rounding seen (rounded " << ieee[d].rounded << ")";
      EXPECT_EQ(ieee[d].stray + ieee[d].other, 0) << "ieee " << cuda::conv_api_name(api) << " " << dirs[d];
    }
  }
  // The graph API under tf32: every direction rounds (its engines are tensor-core ones).
  const ConvOptions tf32 = options_of("exact", ConvApi::Graph, Fp32Precision::TF32);
  const std::vector<Tf32Outcome> on = tf32_probe(tf32);
  cpu::Conv2dGeometry g;
  g.batch = 16, g.in_channels = 64, g.height = 16, g.width = 16, g.out_channels = 64, g.kernel = 3, g.padding = 1;
  const cuda::ConvDirection all[] = {cuda::ConvDirection::Forward, cuda::ConvDirection::BackwardData,
                                     cuda::ConvDirection::BackwardFilter};
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(on[d].rounded, expected[d]) << "tf32 " << dirs[d] << ": not rounded (exact " << on[d].exact << "); "
                                          << cuda::conv_graph_choice(all[d], 0, g, DType::F32, tf32, 0.0);
    EXPECT_EQ(on[d].stray + on[d].other, 0) << "tf32 " << dirs[d];
    EXPECT_NE(cuda::conv_graph_choice(all[d], 0, g, DType::F32, tf32, 0.0).find("tensor-core"), std::string::npos)
        << dirs[d];
  }
}
#endif  // SPIKEMESH_HAVE_CUDA

}  // namespace
}  // namespace sm
