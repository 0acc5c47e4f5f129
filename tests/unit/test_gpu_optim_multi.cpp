// test_gpu_optim_multi.cpp — the multi-tensor optimizer launches (kernels/cuda/optim_multi.h)
// against the per-tensor kernels (kernels/cuda/optim.h), bitwise: SGD (plain, momentum,
// Nesterov), Adam and AdamW over tensors of odd sizes (an empty one, chunk edges), some not
// decayed, for several steps whose learning rate changes, with clipping by the global norm
// active, inactive and off, and the bf16 compute copies; the skip word; the guard comparison;
// the Optimizer built by make_optimizer_cuda (one launch per step, lr and step from device
// memory) against the per-tensor sgd_update_cuda / adam_update_cuda; DeviceGradClip against
// clip_grad_norm_cuda. GPU tests (*Gpu*), skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cuda/optim_multi.h"
#include "spikemesh/optim/optimizer_cuda.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

template <typename U>
bool same_bytes(const std::vector<U>& a, const std::vector<U>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(U)) == 0);
}

// One tensor's arrays for one of the two paths (nullptr when the tensor is empty).
struct Arrays {
  std::unique_ptr<DeviceArray<float>> p, g, s1, s2;
  std::unique_ptr<DeviceArray<__nv_bfloat16>> pb;
  Arrays(const std::vector<float>& p0) {
    const size_t n = p0.size();
    p = std::make_unique<DeviceArray<float>>(p0);
    g = std::make_unique<DeviceArray<float>>(n);
    s1 = std::make_unique<DeviceArray<float>>(std::vector<float>(n, 0.0f));
    s2 = std::make_unique<DeviceArray<float>>(std::vector<float>(n, 0.0f));
    pb = std::make_unique<DeviceArray<__nv_bfloat16>>(n);
  }
};

struct Case {
  std::string name;  // sgd | adam | adamw
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double max_norm = 0.0;
};

const std::vector<int64_t> kSizes = {3, 0, 8191, 8192, 8193, 20000, 1, 16385};

// Runs 5 steps through both paths from the same start and grads; compares every byte.
void check_bitwise(const Case& c) {
  SCOPED_TRACE(c.name + " momentum=" + std::to_string(c.momentum) + (c.nesterov ? " nesterov" : "") +
               " wd=" + std::to_string(c.weight_decay) + " max_norm=" + std::to_string(c.max_norm));
  const bool sgd = c.name == "sgd", decoupled = c.name == "adamw";
  const double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;
  std::vector<Arrays> a, b;  // a: per-tensor kernels, b: multi-tensor
  std::vector<cuda::MultiTensorParam> table;
  std::vector<cuda::GradSpan> spans_a, spans_b;
  for (size_t k = 0; k < kSizes.size(); ++k) {
    const std::vector<float> p0 = gpu_test::random_floats(kSizes[k], 300 + k, -1.0, 1.0);
    a.emplace_back(p0);
    b.emplace_back(p0);
    cuda::MultiTensorParam t;
    t.p = b[k].p->get();
    t.g = b[k].g->get();
    t.state1 = sgd && c.momentum == 0.0 ? nullptr : b[k].s1->get();
    t.state2 = sgd ? nullptr : b[k].s2->get();
    t.p_bf16 = b[k].pb->get();
    t.n = kSizes[k];
    t.decayed = k % 3 != 1 && c.weight_decay != 0.0;  // some tensors opt out of decay
    table.push_back(t);
    spans_a.push_back({a[k].g->get(), kSizes[k]});
    spans_b.push_back({b[k].g->get(), kSizes[k]});
  }
  const std::vector<TensorChunk> chunks = build_chunk_table(kSizes, kMultiTensorChunk);
  const std::vector<TensorChunk> norm_chunks = build_chunk_table(kSizes, kGradNormBlock);
  const std::vector<int64_t> starts = chunk_starts(norm_chunks, static_cast<int64_t>(kSizes.size()));
  DeviceArray<cuda::MultiTensorParam> d_table(table);
  DeviceArray<TensorChunk> d_chunks(chunks), d_norm_chunks(norm_chunks);
  DeviceArray<cuda::GradSpan> d_spans(spans_b);
  DeviceArray<int64_t> d_starts(starts);
  DeviceArray<double> scratch(norm_chunks.size() + kSizes.size() + 1), sum_a(1), sum_b(1);
  DeviceArray<OptimStepScalars> scalars(1);
  for (int64_t t = 1; t <= 5; ++t) {
    const double lr = (sgd ? 0.05 : 1e-2) * (1.0 + 0.37 * static_cast<double>(t));  // a schedule
    for (size_t k = 0; k < kSizes.size(); ++k) {
      const std::vector<float> g = gpu_test::random_floats(kSizes[k], 1000 * t + k, -0.5, 0.5);
      a[k].g->upload(g);
      b[k].g->upload(g);
    }
    // Per-tensor: norm, clip, one launch per tensor with the scalars as arguments.
    if (c.max_norm > 0) {
      cuda::grad_sum_squares_cuda(spans_a, sum_a.get(), nullptr);
      cuda::clip_grads_cuda(spans_a, sum_a.get(), c.max_norm, nullptr);
    }
    for (size_t k = 0; k < kSizes.size(); ++k) {
      const double wd = table[k].decayed ? c.weight_decay : 0.0;
      if (sgd) {
        cuda::SgdStepArgs s;
        s.lr = lr, s.weight_decay = wd, s.momentum = c.momentum, s.nesterov = c.nesterov;
        cuda::sgd_step_cuda(a[k].p->get(), a[k].g->get(), c.momentum == 0.0 ? nullptr : a[k].s1->get(), kSizes[k],
                            s, a[k].pb->get(), nullptr);
      } else {
        const cuda::AdamStepArgs s = cuda::adam_step_args(lr, beta1, beta2, eps, wd, decoupled, t);
        cuda::adam_step_cuda(a[k].p->get(), a[k].g->get(), a[k].s1->get(), a[k].s2->get(), kSizes[k], s,
                             a[k].pb->get(), nullptr);
      }
    }
    // Multi-tensor: three launches for the norm, one for the clip, one for the update.
    if (c.max_norm > 0) {
      cuda::grad_sum_squares_multi_cuda(d_spans.get(), d_norm_chunks.get(), static_cast<int64_t>(norm_chunks.size()),
                                        d_starts.get(), static_cast<int64_t>(kSizes.size()), scratch.get(),
                                        sum_b.get(), nullptr);
      cuda::clip_grads_multi_cuda(d_spans.get(), d_chunks.get(), static_cast<int64_t>(chunks.size()), sum_b.get(),
                                  c.max_norm, nullptr);
    }
    if (sgd) {
      cuda::store_step_scalars_cuda(scalars.get(), sgd_step_scalars(lr), nullptr);
      cuda::MultiSgdArgs m;
      m.weight_decay = c.weight_decay, m.momentum = c.momentum, m.nesterov = c.nesterov;
      cuda::sgd_multi_step_cuda(d_table.get(), d_chunks.get(), static_cast<int64_t>(chunks.size()), m,
                                scalars.get(), nullptr, nullptr);
    } else {
      cuda::store_step_scalars_cuda(
          scalars.get(), adam_step_scalars(lr, beta1, beta2, c.weight_decay, decoupled, t), nullptr);
      cuda::MultiAdamArgs m;
      m.weight_decay = c.weight_decay, m.beta1 = beta1, m.beta2 = beta2, m.eps = eps, m.decoupled = decoupled;
      cuda::adam_multi_step_cuda(d_table.get(), d_chunks.get(), static_cast<int64_t>(chunks.size()), m,
                                 scalars.get(), nullptr, nullptr);
    }
    if (c.max_norm > 0) {
      EXPECT_TRUE(same_bytes(sum_a.download(), sum_b.download())) << "sum of squares, step " << t;
    }
  }
  bool moved = false;
  for (size_t k = 0; k < kSizes.size(); ++k) {
    SCOPED_TRACE("tensor " + std::to_string(k) + " (" + std::to_string(kSizes[k]) + " elements)");
    EXPECT_TRUE(same_bytes(a[k].p->download(), b[k].p->download())) << "param";
    EXPECT_TRUE(same_bytes(a[k].g->download(), b[k].g->download())) << "clipped grad";
    EXPECT_TRUE(same_bytes(a[k].s1->download(), b[k].s1->download())) << "state 1";
    EXPECT_TRUE(same_bytes(a[k].s2->download(), b[k].s2->download())) << "state 2";
    EXPECT_TRUE(same_bytes(a[k].pb->download(), b[k].pb->download())) << "bf16 copy";
    if (kSizes[k] > 0)
      moved = moved || !same_bytes(b[k].p->download(), gpu_test::random_floats(kSizes[k], 300 + k, -1.0, 1.0));
  }
  EXPECT_TRUE(moved) << "the update changed nothing";
}

TEST(GpuOptimMulti, SgdIsBitwiseThePerTensorKernels) {
  SM_SKIP_WITHOUT_GPU();
  for (double momentum : {0.0, 0.9})
    for (bool nesterov : {false, true})
      for (double wd : {0.0, 1e-2})
        for (double max_norm : {0.0, 1.0, 1e9}) {
          if (nesterov && momentum == 0.0) continue;
          check_bitwise(Case{"sgd", momentum, nesterov, wd, max_norm});
        }
}

TEST(GpuOptimMulti, AdamAndAdamWAreBitwiseThePerTensorKernels) {
  SM_SKIP_WITHOUT_GPU();
  for (const char* name : {"adam", "adamw"})
    for (double wd : {0.0, 0.05})
      for (double max_norm : {0.0, 1.0, 1e9}) check_bitwise(Case{name, 0.0, false, wd, max_norm});
}

TEST(GpuOptimMulti, ASetSkipWordWritesNothing) {
  SM_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> sizes = {5, 9000};
  std::vector<std::unique_ptr<DeviceArray<float>>> p, g, m, v;
  std::vector<cuda::MultiTensorParam> table;
  for (size_t k = 0; k < sizes.size(); ++k) {
    p.push_back(std::make_unique<DeviceArray<float>>(gpu_test::random_floats(sizes[k], 7 + k, -1.0, 1.0)));
    g.push_back(std::make_unique<DeviceArray<float>>(gpu_test::random_floats(sizes[k], 17 + k, -1.0, 1.0)));
    m.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(sizes[k], 0.0f)));
    v.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(sizes[k], 0.0f)));
    cuda::MultiTensorParam t;
    t.p = p[k]->get(), t.g = g[k]->get(), t.state1 = m[k]->get(), t.state2 = v[k]->get(), t.n = sizes[k];
    table.push_back(t);
  }
  const std::vector<TensorChunk> chunks = build_chunk_table(sizes, kMultiTensorChunk);
  DeviceArray<cuda::MultiTensorParam> d_table(table);
  DeviceArray<TensorChunk> d_chunks(chunks);
  DeviceArray<OptimStepScalars> scalars(std::vector<OptimStepScalars>{adam_step_scalars(0.1, 0.9, 0.999, 0, false, 1)});
  DeviceArray<int32_t> skip(std::vector<int32_t>{1});
  const std::vector<float> before = p[1]->download();
  cuda::adam_multi_step_cuda(d_table.get(), d_chunks.get(), static_cast<int64_t>(chunks.size()), cuda::MultiAdamArgs{},
                             scalars.get(), skip.get(), nullptr);
  EXPECT_TRUE(same_bytes(before, p[1]->download()));
  EXPECT_TRUE(same_bytes(std::vector<float>(sizes[1], 0.0f), m[1]->download()));
  skip.upload({0});
  cuda::adam_multi_step_cuda(d_table.get(), d_chunks.get(), static_cast<int64_t>(chunks.size()), cuda::MultiAdamArgs{},
                             scalars.get(), skip.get(), nullptr);
  EXPECT_FALSE(same_bytes(before, p[1]->download()));
}

TEST(GpuOptimMulti, FlagsMismatchComparesEveryFlagInBatches) {
  SM_SKIP_WITHOUT_GPU();
  const int n = 70;  // three launches of at most 32
  std::vector<int32_t> values(n);
  for (int i = 0; i < n; ++i) values[i] = i % 2 ? 5 : 0;  // nonzero counts as 1
  DeviceArray<int32_t> flags(values), out(1);
  std::vector<cuda::ExpectedFlag> expected(n);
  for (int i = 0; i < n; ++i) expected[i] = {flags.get() + i, i % 2};
  cuda::flags_mismatch_cuda(expected.data(), n, out.get(), nullptr);
  EXPECT_EQ(out.download()[0], 0);
  for (int wrong : {0, 31, 32, 69}) {
    std::vector<cuda::ExpectedFlag> e = expected;
    e[wrong].expected = 1 - e[wrong].expected;
    cuda::flags_mismatch_cuda(e.data(), n, out.get(), nullptr);
    EXPECT_EQ(out.download()[0], 1) << "flag " << wrong;
  }
  cuda::flags_mismatch_cuda(expected.data(), 0, out.get(), nullptr);
  EXPECT_EQ(out.download()[0], 0);
}

std::unique_ptr<Param> device_param(const std::string& name, int64_t n, uint64_t seed, bool decay) {
  auto p = std::make_unique<Param>();
  p->name = p->local_name = name;
  p->shape = p->local_shape = {n};
  p->weight_decay = decay;
  Tensor host = Tensor::empty({n}, DType::F32);
  const std::vector<float> v = gpu_test::random_floats(n, seed, -1.0, 1.0);
  std::copy(v.begin(), v.end(), host.data<float>());
  p->value = host.to(Device::cuda(0));
  p->grad = Tensor::zeros({n}, DType::F32, Device::cuda(0));
  return p;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const uint8_t* b = static_cast<const uint8_t*>(h.raw());
  return std::vector<uint8_t>(b, b + h.nbytes());
}

// make_optimizer_cuda's one-launch step (and stage_step + enqueue_update) equals the
// per-tensor update functions with the lr of each step, bitwise, with clipping before it.
TEST(GpuOptimMulti, CudaOptimizerIsBitwiseThePerTensorUpdates) {
  SM_SKIP_WITHOUT_GPU();
  for (const char* name : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(name);
    OptimizerConfig cfg;
    cfg.name = name;
    cfg.lr = 0.02;
    cfg.weight_decay = 0.01;
    cfg.momentum = 0.9;
    cfg.nesterov = true;
    std::vector<std::unique_ptr<Param>> mine, ref;
    std::vector<Param*> mp, rp;
    const std::vector<int64_t> sizes = {7, 8193, 1, 30000};
    for (size_t k = 0; k < sizes.size(); ++k) {
      mine.push_back(device_param("p" + std::to_string(k), sizes[k], 40 + k, k != 2));
      ref.push_back(device_param("p" + std::to_string(k), sizes[k], 40 + k, k != 2));
      mp.push_back(mine.back().get());
      rp.push_back(ref.back().get());
    }
    auto opt = make_optimizer_cuda(cfg, mp);
    ASSERT_TRUE(opt->supports_captured_update());
    std::vector<Tensor> s1, s2;
    for (Param* p : rp) {
      s1.push_back(Tensor::zeros(p->value.shape(), DType::F32, p->value.device()));
      s2.push_back(Tensor::zeros(p->value.shape(), DType::F32, p->value.device()));
    }
    for (int64_t t = 1; t <= 4; ++t) {
      const double lr = 0.02 / static_cast<double>(t);  // a schedule
      opt->set_lr(lr);
      for (size_t k = 0; k < sizes.size(); ++k) {
        const std::vector<float> g = gpu_test::random_floats(sizes[k], 900 + 10 * t + k, -2.0, 2.0);
        Tensor h = Tensor::empty({sizes[k]}, DType::F32);
        std::copy(g.begin(), g.end(), h.data<float>());
        mp[k]->grad.copy_from(h);
        rp[k]->grad.copy_from(h);
      }
      const double norm_mine = clip_grad_norm_cuda(mp, 1.0);
      const double norm_ref = clip_grad_norm_cuda(rp, 1.0);
      EXPECT_EQ(norm_mine, norm_ref);
      if (t % 2) {
        opt->step();
      } else {
        opt->stage_step();
        opt->enqueue_update(nullptr);
      }
      EXPECT_EQ(opt->step_count(), t);
      for (size_t k = 0; k < sizes.size(); ++k) {
        const double wd = rp[k]->weight_decay ? cfg.weight_decay : 0.0;
        if (cfg.name == "sgd")
          sgd_update_cuda(*rp[k], &s1[k], lr, wd, cfg.momentum, cfg.nesterov);
        else
          adam_update_cuda(*rp[k], s1[k], s2[k], lr, cfg.beta1, cfg.beta2, cfg.eps, wd, cfg.name == "adamw", t);
      }
    }
    const std::vector<OptimState> states = opt->state();
    for (size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_TRUE(bytes_of(mp[k]->value) == bytes_of(rp[k]->value)) << "param " << k;
      EXPECT_TRUE(bytes_of(*states[cfg.name == "sgd" ? k : 2 * k].value) == bytes_of(s1[k])) << "state " << k;
      if (cfg.name != "sgd") {
        EXPECT_TRUE(bytes_of(*states[2 * k + 1].value) == bytes_of(s2[k])) << "state " << k;
      }
    }
  }
}

// DeviceGradClip (four launches, no host read) equals clip_grad_norm_cuda bitwise.
TEST(GpuOptimMulti, DeviceGradClipIsBitwiseClipGradNormCuda) {
  SM_SKIP_WITHOUT_GPU();
  for (double max_norm : {0.5, 1e9}) {
    std::vector<std::unique_ptr<Param>> mine, ref;
    std::vector<Param*> mp, rp;
    for (int64_t k = 0; k < 5; ++k) {
      const int64_t n = k == 3 ? 8192 * 3 + 5 : 11 + 1000 * k;
      mine.push_back(device_param("g", n, 0, true));
      ref.push_back(device_param("g", n, 0, true));
      const std::vector<float> g = gpu_test::random_floats(n, 60 + k, -1.0, 1.0);
      Tensor h = Tensor::empty({n}, DType::F32);
      std::copy(g.begin(), g.end(), h.data<float>());
      mine.back()->grad.copy_from(h);
      ref.back()->grad.copy_from(h);
      mp.push_back(mine.back().get());
      rp.push_back(ref.back().get());
    }
    DeviceGradClip clip(mp, mp, max_norm);
    clip.enqueue();
    const double sum_sq = clip.sum_sq().to(Device::cpu()).data<double>()[0];
    const double norm_ref = clip_grad_norm_cuda(rp, max_norm);
    EXPECT_EQ(std::sqrt(sum_sq), norm_ref) << "max_norm " << max_norm;
    for (size_t k = 0; k < mp.size(); ++k)
      EXPECT_TRUE(bytes_of(mp[k]->grad) == bytes_of(rp[k]->grad)) << "grad " << k << ", max_norm " << max_norm;
  }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuOptimMulti, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
