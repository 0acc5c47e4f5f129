// test_data.cpp — importers, HDF5 dataset schema/validation, sampler and encoders.
#include <gtest/gtest.h>

#include "error_of.h"
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "spikemesh/data/encoder.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/importers.h"
#include "spikemesh/data/prefetcher.h"
#include "spikemesh/data/sampler.h"

using namespace sm;

namespace {
std::string tmp_path(const std::string& name) {
  return "/tmp/spikemesh_test_" + std::to_string(getpid()) + "_" + name;
}

// Writes a small NCHW dataset by hand, with knobs to break it.
void write_small(const std::string& path, int64_t ntrain, int64_t ylen, int label_bad = -1,
                 bool drop_test = false, int xrank = 4) {
  H5File f = H5File::create(path);
  f.set_attr("num_classes", int64_t(3));
  f.set_attr("layout", std::string("NCHW"));
  Shape xs = xrank == 4 ? Shape{ntrain, 1, 2, 2} : Shape{ntrain, 4};
  Tensor x = Tensor::zeros(xs, DType::U8);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i % 251);
  Tensor y = Tensor::zeros({ylen}, DType::I64);
  for (int64_t i = 0; i < ylen; ++i) y.data<int64_t>()[i] = i % 3;
  if (label_bad >= 0) y.data<int64_t>()[label_bad] = 7;
  f.write("/train/x", x);
  f.write("/train/y", y);
  if (!drop_test) {
    f.write("/test/x", x);
    f.write("/test/y", y);
  }
}

}  // namespace

TEST(Dataset, SynthDvsWritesValidatedFileAndReadsAnyOrder) {
  std::string p = tmp_path("synth.h5");
  SynthDvsConfig c;
  c.T = 3;
  c.size = 16;
  c.train = 20;
  c.test = 7;
  c.classes = 4;
  make_synth_dvs(c, p);
  H5Dataset d = H5Dataset::open(p);
  EXPECT_EQ(d.info().layout, "NTCHW");
  EXPECT_EQ(d.info().sample_shape, (Shape{3, 2, 16, 16}));
  EXPECT_EQ(d.size(Split::Train), 20);
  EXPECT_EQ(d.size(Split::Test), 7);
  Tensor x, y, x1, y1;
  d.read(Split::Train, {5, 2, 3, 5}, x, y);
  EXPECT_EQ(x.shape(), (Shape{4, 3, 2, 16, 16}));
  d.read(Split::Train, {3}, x1, y1);
  int64_t row = 3 * 2 * 16 * 16;
  double events = 0;
  for (int64_t f = 0; f < row; ++f) {
    ASSERT_EQ(x.at(2 * row + f), x1.at(f));
    ASSERT_EQ(x.at(0 * row + f), x.at(3 * row + f));
    events += x1.at(f);
  }
  EXPECT_GT(events, 0);
  EXPECT_EQ(y.at(2), y1.at(0));
  // Same seed -> same file content; the generator is a pure function of (seed, index).
  std::string p2 = tmp_path("synth2.h5");
  make_synth_dvs(c, p2);
  Tensor x2, y2;
  H5Dataset::open(p2).read(Split::Train, {3}, x2, y2);
  for (int64_t f = 0; f < row; ++f) ASSERT_EQ(x2.at(f), x1.at(f));
  std::remove(p.c_str());
  std::remove(p2.c_str());
}

TEST(Dataset, FashionMnistImport) {
  const std::string src = "/usr/share/datasets/fashion-mnist";
  if (!std::ifstream(src + "/train-images-idx3-ubyte.gz").good()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  std::string p = tmp_path("fmnist.h5");
  EXPECT_EQ(import_fashion_mnist(src, p), 70000);
  H5Dataset d = H5Dataset::open(p);
  EXPECT_EQ(d.size(Split::Train), 60000);
  EXPECT_EQ(d.size(Split::Test), 10000);
  EXPECT_EQ(d.info().sample_shape, (Shape{1, 28, 28}));
  Tensor x, y;
  d.read(Split::Train, {0, 59999}, x, y);
  EXPECT_EQ(y.at(0), 9);  // the first Fashion-MNIST training label is 9 (ankle boot)
  double mx = 0;
  for (int64_t i = 0; i < x.numel(); ++i) mx = std::max(mx, x.at(i));
  EXPECT_LE(mx, 1.0);
  EXPECT_GT(mx, 0.5);
  std::remove(p.c_str());
  EXPECT_NE(error_of([&] { import_fashion_mnist("/nonexistent", p); }).find("/nonexistent"), std::string::npos);
}

TEST(Dataset, BadFilesGiveOneClearMessage) {
  std::string p = tmp_path("bad.h5");
  EXPECT_NE(error_of([&] { H5Dataset::open(p + ".missing"); }).find(".missing"), std::string::npos);
  write_small(p, 6, 5);
  EXPECT_NE(error_of([&] { H5Dataset::open(p); }).find("has 6 samples but /train/y has 5"), std::string::npos);
  write_small(p, 6, 6, 4);
  EXPECT_NE(error_of([&] { H5Dataset::open(p); }).find("/train/y[4] = 7 is out of range"), std::string::npos);
  write_small(p, 6, 6, -1, true);
  EXPECT_NE(error_of([&] { H5Dataset::open(p); }).find("missing /test/x"), std::string::npos);
  write_small(p, 6, 6, -1, false, 2);
  EXPECT_NE(error_of([&] { H5Dataset::open(p); }).find("needs 4 dims"), std::string::npos);
  write_small(p, 6, 6);
  EXPECT_EQ(error_of([&] { H5Dataset::open(p); }), "");
  {  // truncated file
    std::ifstream in(p, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), bytes.size() / 2);
  }
  std::string msg = error_of([&] { H5Dataset::open(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  {  // not HDF5 at all
    std::ofstream out(p, std::ios::trunc);
    out << "hello";
  }
  msg = error_of([&] { H5Dataset::open(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  std::remove(p.c_str());
}

TEST(Sampler, OnePermutationPerEpochSlicedOverRanks) {
  EpochSampler s(103, 10, 42, true);
  EXPECT_EQ(s.batches_per_epoch(), 10);
  std::set<int64_t> seen;
  for (int64_t b = 0; b < 10; ++b) {
    auto whole = s.batch_indices(0, b);
    auto r0 = s.batch_indices(0, b, 0, 2), r1 = s.batch_indices(0, b, 1, 2);
    ASSERT_EQ(r0.size(), 5u);
    ASSERT_EQ(r1.size(), 5u);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(r0[k], whole[k]);
      EXPECT_EQ(r1[k], whole[5 + k]);
    }
    seen.insert(whole.begin(), whole.end());
  }
  EXPECT_EQ(seen.size(), 100u);  // disjoint within an epoch
  EpochSampler again(103, 10, 42, true);
  EXPECT_EQ(again.batch_indices(3, 7), s.batch_indices(3, 7));  // deterministic
  EXPECT_NE(s.batch_indices(1, 0), s.batch_indices(0, 0));       // reshuffled each epoch
  EpochSampler other(103, 10, 43, true);
  EXPECT_NE(other.batch_indices(0, 0), s.batch_indices(0, 0));
  EpochSampler ordered(103, 10, 42, false, false);
  EXPECT_EQ(ordered.batches_per_epoch(), 11);
  EXPECT_EQ(ordered.batch_indices(0, 10), (std::vector<int64_t>{100, 101, 102}));
}

TEST(Encoder, DirectPoissonAndTimeMajor) {
  Tensor x = Tensor::empty({2, 3}, DType::F32);
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = i / 5.0f;
  Tensor d = encode_static(x, 4, Encoding::Direct, DType::F64, 1, 0, {10, 11});
  EXPECT_EQ(d.shape(), (Shape{4, 2, 3}));
  EXPECT_DOUBLE_EQ(d.at(3 * 6 + 1 * 3 + 2), x.at(5));
  // Poisson: rate ≈ pixel value; a sample's spikes depend on its global index only.
  Tensor big = Tensor::full({2, 1000}, 0.3, DType::F32);
  Tensor p = encode_static(big, 50, Encoding::Poisson, DType::F32, 1, 0, {7, 8});
  EXPECT_TRUE(p.is_binary());
  double m = 0;
  for (int64_t i = 0; i < p.numel(); ++i) m += p.at(i);
  EXPECT_NEAR(m / p.numel(), 0.3, 0.01);
  Tensor one = Tensor::full({1, 1000}, 0.3, DType::F32);
  Tensor q = encode_static(one, 50, Encoding::Poisson, DType::F32, 1, 0, {8});
  for (int t = 0; t < 50; ++t)
    for (int f = 0; f < 1000; ++f) ASSERT_EQ(q.at(t * 1000 + f), p.at(t * 2000 + 1000 + f));
  Tensor ev = Tensor::empty({2, 3, 4}, DType::F32);
  for (int i = 0; i < 24; ++i) ev.data<float>()[i] = i;
  Tensor tm = events_to_time_major(ev, DType::F32);
  EXPECT_EQ(tm.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(tm.at((2 * 2 + 1) * 4 + 3), ev.at((1 * 3 + 2) * 4 + 3));
  EXPECT_THROW(encoding_from_name("rate"), Error);
}

TEST(Prefetcher, InOrderAndPropagatesErrors) {
  Prefetcher<int> p([](int64_t k) { return static_cast<int>(k * k); }, 5, 2);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(*p.next(), k * k);
  EXPECT_FALSE(p.next().has_value());
  Prefetcher<int> bad([](int64_t k) -> int {
    if (k == 2) throw Error(ErrorKind::Input, "broken sample");
    return 1;
  }, 4);
  EXPECT_EQ(*bad.next(), 1);
  EXPECT_EQ(*bad.next(), 1);
  EXPECT_THROW(bad.next(), Error);
}
