// test_dataset_checks.cpp — input values a dataset file can damage (data/h5_dataset.h): f32
// samples holding NaN or Inf are refused when read, naming the file, split and sample (an
// error of this rank alone: ErrorKind::RankInput, so the front end aborts the job instead of
// leaving other ranks waiting); a non-finite or zero x_scale is refused at open.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "error_of.h"
#include "spikemesh/data/h5_dataset.h"

namespace sm {
namespace {

std::string write_f32_dataset(const std::string& tag, double x_scale, int64_t bad_sample, float bad_value) {
  const std::string path = ::testing::TempDir() + "sm_dc_" + std::to_string(getpid()) + "_" + tag + ".h5";
  DatasetInfo info;
  info.num_classes = 3;
  info.layout = "NCHW";
  info.x_scale = x_scale;
  info.sample_shape = {1, 2, 2};
  info.stored = DType::F32;
  info.train_size = 6;
  info.test_size = 2;
  H5DatasetWriter w(path, info);
  for (Split s : {Split::Train, Split::Test}) {
    const int64_t n = s == Split::Train ? 6 : 2;
    Tensor x = Tensor::zeros({n, 1, 2, 2}, DType::F32), y = Tensor::zeros({n}, DType::I64);
    for (int64_t i = 0; i < n * 4; ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i % 5);
    if (s == Split::Train && bad_sample >= 0) x.data<float>()[bad_sample * 4 + 2] = bad_value;
    w.write(s, 0, x, y);
  }
  w.commit();
  return path;
}

}  // namespace

TEST(DatasetChecks, NonFiniteSamplesAreRefusedWhenRead) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const std::string p = write_f32_dataset("nan", 1.0, 4, bad);
    H5Dataset d = H5Dataset::open(p);
    Tensor x, y;
    EXPECT_EQ(error_of([&] { d.read(Split::Train, {0, 1, 2, 3}, x, y); }), "");  // clean samples read fine
    try {
      d.read(Split::Train, {1, 4, 5}, x, y);
      ADD_FAILURE() << "sample 4 holds " << bad << " but was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::RankInput);
      const std::string m = e.what();
      EXPECT_NE(m.find(p), std::string::npos) << m;
      EXPECT_NE(m.find("/train/x[4]"), std::string::npos) << m;
    }
    std::remove(p.c_str());
  }
}

TEST(DatasetChecks, XScaleMustBeFiniteAndNonZero) {
  for (double s : {std::nan(""), 0.0, HUGE_VAL}) {
    const std::string p = write_f32_dataset("scale", s, -1, 0);
    const std::string e = error_of([&] { H5Dataset::open(p); });
    EXPECT_NE(e.find("x_scale"), std::string::npos) << "x_scale " << s << ": '" << e << "'";
    std::remove(p.c_str());
  }
  // An x_scale that overflows f32 samples to Inf is caught on read.
  const std::string p = write_f32_dataset("overflow", 1e39, -1, 0);
  H5Dataset d = H5Dataset::open(p);
  Tensor x, y;
  EXPECT_NE(error_of([&] { d.read(Split::Train, {3}, x, y); }).find("NaN or Inf"), std::string::npos);
  std::remove(p.c_str());
}

}  // namespace sm
