// test_core.cpp — Tensor views/copies, caching allocator accounting, Philox RNG,
// bit packing, layer naming and layout-independent initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "spikemesh/core/allocator.h"
#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/kernels/cpu/elementwise.h"
#include "spikemesh/layers/unit.h"

using namespace sm;

TEST(Tensor, ViewsShareStorageAndSliceRows) {
  Tensor t = Tensor::zeros({4, 3}, DType::F64);
  for (int i = 0; i < 12; ++i) t.data<double>()[i] = i;
  Tensor v = t.view({2, -1});
  EXPECT_EQ(v.shape(), (Shape{2, 6}));
  Tensor s = t.slice0(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.at(0), 3.0);
  s.data<double>()[0] = 42;
  EXPECT_EQ(t.at(3), 42.0);
  Tensor c = t.clone();
  c.data<double>()[0] = -1;
  EXPECT_EQ(t.at(0), 0.0);
  EXPECT_THROW(t.view({5, 3}), Error);
  EXPECT_THROW(t.data<float>(), Error);
  EXPECT_THROW(Tensor::empty({1, 1, 1, 1, 1, 1, 1}, DType::F32), Error);
}

TEST(Tensor, DtypeConversionRoundTrips) {
  Tensor t = Tensor::full({5}, 1.25, DType::F32);
  Tensor d = t.to_dtype(DType::F64);
  EXPECT_EQ(d.dtype(), DType::F64);
  EXPECT_EQ(d.at(4), 1.25);
  Tensor i = Tensor::full({2}, 7, DType::I64).to_dtype(DType::F32);
  EXPECT_EQ(i.at(1), 7.0);
  EXPECT_EQ(dtype_from_name("fp64"), DType::F64);
  EXPECT_THROW(dtype_from_name("fp8"), Error);
}

TEST(Allocator, TracksCurrentAndPeakAndReusesBlocks) {
  Allocator& a = cpu_allocator();
  size_t base = a.current_bytes();
  a.reset_peak();
  void* p1;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::F32);  // 4 MiB
    p1 = t.raw();
    EXPECT_GE(a.current_bytes(), base + (4u << 20));
  }
  EXPECT_EQ(a.current_bytes(), base);
  EXPECT_GE(a.peak_bytes(), base + (4u << 20));
  Tensor t2 = Tensor::empty({1 << 20}, DType::F32);
  EXPECT_EQ(t2.raw(), p1);  // served from the cache
  EXPECT_EQ(CpuCachingAllocator::round_size(1000), 1024u);
  EXPECT_LE(CpuCachingAllocator::round_size(5000), 5000u * 17 / 16);  // classes waste < 1/16
  EXPECT_EQ(CpuCachingAllocator::round_size(3u << 20), 3u << 20);     // 3·2^k is a class
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123 known-answer test for philox4x32-10 (counter = key = 0).
  Philox4 r = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  Philox4 r2 = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r2[0], 0x408f276du);
  EXPECT_EQ(r2[1], 0x41c83b0eu);
  EXPECT_EQ(r2[2], 0xa20bc7c6u);
  EXPECT_EQ(r2[3], 0x6d5451fdu);
}

TEST(Rng, UniformAndNormalMomentsAndIndependence) {
  CounterRng a(1, "x"), b(1, "y"), c(2, "x");
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  int same = 0;
  for (int i = 0; i < n; ++i) {
    double u = a.uniform(i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    double z = a.normal(i, 3);
    sn += z;
    sn2 += z * z;
    same += a.uniform(i) == b.uniform(i) || a.uniform(i) == c.uniform(i);
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
  EXPECT_EQ(same, 0);
  EXPECT_EQ(a.uniform(12345, 7, 9), CounterRng(1, "x").uniform(12345, 7, 9));  // pure function
}

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median({7.0}), 7.0);
  EXPECT_EQ(median({}), 0.0);
}

TEST(BitPack, SpikeMessagesInEveryFloatDtype) {
  // The pipeline's stage-boundary messages: any float dtype packs to the same bits and comes
  // back in the receiver's dtype; a value other than 0 or 1 refuses to pack.
  Tensor s = Tensor::empty({2, 3, 11}, DType::F64);  // [T, n, features]
  CounterRng rng(5, "spikes");
  for (int64_t i = 0; i < s.numel(); ++i) s.data<double>()[i] = rng.uniform(i) < 0.4 ? 1.0 : 0.0;
  const Tensor ref = pack_bits(s);
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor bits = pack_spikes_on_host(s.to_dtype(dt));
    ASSERT_TRUE(bits.defined());
    ASSERT_EQ(bits.numel(), (s.numel() + 7) / 8);
    for (int64_t j = 0; j < bits.numel(); ++j) ASSERT_EQ(bits.data<uint8_t>()[j], ref.data<uint8_t>()[j]) << j;
    const Tensor back = unpack_spikes_on_host(bits, s.shape(), dt);
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(back.shape(), s.shape());
    EXPECT_TRUE(back.is_binary());
    const Tensor b64 = back.to_dtype(DType::F64);
    for (int64_t i = 0; i < s.numel(); ++i) ASSERT_EQ(b64.data<double>()[i], s.data<double>()[i]) << i;
  }
  Tensor not_spikes = s.to_dtype(DType::BF16).to_dtype(DType::F32);
  not_spikes.data<float>()[7] = 0.5f;
  EXPECT_FALSE(pack_spikes_on_host(not_spikes).defined());
  EXPECT_FALSE(pack_spikes_on_host(not_spikes.to_dtype(DType::F16)).defined());
}

TEST(BitPack, RoundTripAndSize) {
  Tensor s = Tensor::empty({3, 37}, DType::F32);
  CounterRng rng(3, "bits");
  for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] = rng.uniform(i) < 0.3 ? 1.f : 0.f;
  s.set_binary(true);
  SavedActivation saved = SavedActivation::save(s);
  EXPECT_TRUE(saved.packed());
  EXPECT_EQ(saved.bytes(), (111u + 7) / 8);
  Tensor r = saved.restore();
  EXPECT_TRUE(r.is_binary());
  EXPECT_EQ(r.shape(), s.shape());
  for (int64_t i = 0; i < s.numel(); ++i) ASSERT_EQ(r.at(i), s.at(i)) << i;
  // LSB first: element 0 is bit 0 of byte 0.
  Tensor one = Tensor::zeros({9}, DType::F64);
  one.data<double>()[0] = 1;
  one.data<double>()[8] = 1;
  Tensor b = pack_bits(one);
  EXPECT_EQ(b.at(0), 1.0);
  EXPECT_EQ(b.at(1), 1.0);
  Tensor nb = Tensor::full({4}, 0.5, DType::F32);
  EXPECT_FALSE(SavedActivation::save(nb).packed());
}

TEST(BitPack, VectorPackingEqualsTheElementRule) {
  // Bit k of byte j is x[8j + k] != 0 (NaN and every nonzero set, ±0 clear) at lengths around
  // the 8-element bytes, in f32 and f64; unpacking gives 0 and 1 back.
  CounterRng rng(9, "pack");
  for (int64_t n : {1, 7, 8, 9, 63, 64, 65, 1001}) {
    Tensor f = Tensor::empty({n}, DType::F32), d = Tensor::empty({n}, DType::F64);
    for (int64_t i = 0; i < n; ++i) {
      const double u = rng.uniform(n * 1000 + i);
      const double v = u < 0.4 ? 0.0 : u < 0.5 ? -0.0 : u < 0.55 ? std::nan("") : u < 0.6 ? 1e-40 : u < 0.8 ? 1.0 : -2.5;
      f.data<float>()[i] = static_cast<float>(v);
      d.data<double>()[i] = v;
    }
    for (const Tensor& t : {f, d}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t.dtype()) << " n " << n);
      const Tensor b = pack_bits(t);
      ASSERT_EQ(b.numel(), (n + 7) / 8);
      for (int64_t i = 0; i < n; ++i) {
        const double v = t.dtype() == DType::F32 ? t.data<float>()[i] : t.data<double>()[i];
        ASSERT_EQ((b.data<uint8_t>()[i / 8] >> (i % 8)) & 1, v != 0.0 ? 1 : 0) << i;
      }
      for (int64_t i = n; i < b.numel() * 8; ++i) ASSERT_EQ((b.data<uint8_t>()[i / 8] >> (i % 8)) & 1, 0) << i;
      Tensor back = Tensor::empty({n}, t.dtype());
      unpack_bits(b, back);
      for (int64_t i = 0; i < n; ++i) {
        const double v = t.dtype() == DType::F32 ? t.data<float>()[i] : t.data<double>()[i];
        ASSERT_EQ(back.at(i), v != 0.0 ? 1.0 : 0.0) << i;
      }
    }
  }
}

TEST(BitPack, SerialPackingEqualsPackBits) {
  // pack_bits_serial (for kernels inside a parallel region) writes pack_bits' bytes, f32 and f64.
  CounterRng rng(11, "serial");
  for (int64_t n = 1; n <= 130; ++n) {
    Tensor f = Tensor::empty({n}, DType::F32), d = Tensor::empty({n}, DType::F64);
    for (int64_t i = 0; i < n; ++i) {
      const double v = rng.uniform(n * 1000 + i) < 0.3 ? 1.0 : 0.0;
      f.data<float>()[i] = static_cast<float>(v);
      d.data<double>()[i] = v;
    }
    std::vector<uint8_t> sf(static_cast<size_t>((n + 7) / 8)), sd(sf.size());
    pack_bits_serial(f.data<float>(), n, sf.data());
    pack_bits_serial(d.data<double>(), n, sd.data());
    const Tensor bf = pack_bits(f), bd = pack_bits(d);
    for (size_t j = 0; j < sf.size(); ++j) {
      ASSERT_EQ(sf[j], bf.data<uint8_t>()[j]) << "f32 n " << n << " byte " << j;
      ASSERT_EQ(sd[j], bd.data<uint8_t>()[j]) << "f64 n " << n << " byte " << j;
    }
  }
}

TEST(BitPack, ChannelBlockedUnpackIsTheBlockedLayoutOfTheSpikes) {
  // x [N, C, H, W] packed whole; samples [first, first + count) unpacked into [count, C/B, H, W, B]
  // equal x at every index (block 8 and 16); shapes the layout cannot take are refused.
  const int64_t N = 3, C = 32, H = 4, W = 6, HW = H * W;
  CounterRng rng(12, "blocked");
  Tensor x = Tensor::empty({N, C, H, W}, DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(i) < 0.3 ? 1.0f : 0.0f;
  const Tensor bits = pack_bits(x);
  const uint8_t* b = bits.data<uint8_t>();
  for (int64_t block : {8, 16}) {
    const int64_t first = 1, count = 2;
    std::vector<float> out(static_cast<size_t>(count * C * HW), -1.0f);
    ASSERT_TRUE(unpack_bits_channel_blocked(b, first, count, C, HW, block, out.data()));
    for (int64_t n = 0; n < count; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < HW; ++p)
          ASSERT_EQ(out[static_cast<size_t>(((n * (C / block) + c / block) * HW + p) * block + c % block)],
                    x.data<float>()[((first + n) * C + c) * HW + p])
              << "block " << block << " n " << n << " c " << c << " pixel " << p;
  }
  std::vector<float> out(static_cast<size_t>(C * 40));
  EXPECT_FALSE(unpack_bits_channel_blocked(b, 0, 1, C, 36, 16, out.data()));  // a plane of 36 bits: no byte start
  EXPECT_FALSE(unpack_bits_channel_blocked(b, 0, 1, 24, HW, 16, out.data()));  // 24 channels in blocks of 16
  EXPECT_FALSE(unpack_bits_channel_blocked(b, 0, 1, C, HW, 4, out.data()));    // no such layout
}

TEST(Elementwise, DeterministicSumIndependentOfThreads) {
  Tensor t = Tensor::empty({100003}, DType::F32);
  CounterRng rng(5, "sum");
  double ref = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = static_cast<float>(rng.uniform(i) - 0.5);
  }
  for (int64_t b = 0; b < t.numel(); b += 4096) {
    double s = 0;
    for (int64_t i = b; i < std::min<int64_t>(t.numel(), b + 4096); ++i) s += t.at(i);
    ref += s;
  }
  EXPECT_EQ(cpu::sum(t), ref);
}

namespace {
// A minimal leaf layer with two params, to test naming, flat buffers and init.
class Toy : public Layer {
 public:
  Toy() {
    add_param("weight", {4, 3}, InitSpec::normal(0.0, 1.0));
    add_param("bias", {4}, InitSpec::constant(0.5), false);
    add_buffer("running_mean", {4}, 0.0);
  }
  Shape output_shape(const Shape& in) const override { return in; }
  std::string type() const override { return "toy"; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx&) override { return x; }
  Tensor backward_input_cpu(const Tensor& dy, Ctx&) override { return dy; }
};
}  // namespace

TEST(Unit, NamesParamsByPathAndBindsFlatBuffers) {
  Unit u("features.3");
  auto a = std::make_unique<Toy>();
  a->set_name("0");
  auto res = std::make_unique<Residual>();
  res->set_name("attn");
  auto b = std::make_unique<Toy>();
  b->set_name("q_conv");
  res->add(std::move(b));
  u.add(std::move(a));
  u.add(std::move(res));
  u.finalize(DType::F32, Device::cpu(), 11);
  auto ps = u.params();
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_EQ(ps[0]->name, "features.3.0.weight");
  EXPECT_EQ(ps[1]->name, "features.3.0.bias");
  EXPECT_EQ(ps[2]->name, "features.3.attn.q_conv.weight");
  EXPECT_EQ(u.buffers()[1]->name, "features.3.attn.q_conv.running_mean");
  EXPECT_EQ(u.num_params(), 32);
  EXPECT_EQ(ps[1]->value.raw(), static_cast<char*>(u.flat_value().raw()) + 12 * 4);
  EXPECT_EQ(ps[1]->value.at(3), 0.5);
  EXPECT_FALSE(ps[1]->weight_decay);
  // Same name + seed -> same values; different name -> different values.
  Unit u2("features.3");
  auto c = std::make_unique<Toy>();
  c->set_name("0");
  u2.add(std::move(c));
  u2.finalize(DType::F64, Device::cpu(), 11);
  for (int i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(ps[0]->value.at(i), u2.params()[0]->value.at(i));
  EXPECT_NE(ps[0]->value.at(0), ps[2]->value.at(0));
}

TEST(Init, ShardedParamDrawsItsSliceOfTheGlobalTensor) {
  Param full, half;
  full.name = half.name = "w";
  full.shape = full.local_shape = {4, 6};
  full.init = half.init = InitSpec::normal(0, 1);
  full.value = Tensor::empty({4, 6}, DType::F64);
  init_param(full, 9);
  half.shape = {4, 6};
  half.local_shape = {4, 3};
  half.shard = {ShardSpec::Group::TP, 1, 1, 2};  // second half of dim 1
  half.value = Tensor::empty({4, 3}, DType::F64);
  init_param(half, 9);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(half.value.at(r * 3 + c), full.value.at(r * 6 + 3 + c));
}
