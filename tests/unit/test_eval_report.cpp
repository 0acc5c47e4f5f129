// test_eval_report.cpp — what `spikemesh eval` writes and prints (train/eval_report.h) and the
// configuration subset it starts from (toml_subset): eval.h5 read back (attributes, per-class
// counts and accuracy with NaN for an empty class, firing rates and their layer names), no
// .tmp left behind, an unwritable path as one Input error naming it, the table's rows. The
// command end to end (equality with train's logged evaluation, layouts) is tests/e2e/eval.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "error_of.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/train/eval_report.h"
#include "spikemesh/train/train_config.h"

namespace sm {
namespace {

EvalReport sample_report() {
  EvalReport r;
  r.checkpoint = "out/run/ckpt_000000012.h5";
  r.data = "data.h5";
  r.split = "test";
  r.model = "fmnist_csnn";
  r.precision = "fp32";
  r.layout = "dp=1 tp=1 pp=1";
  r.step = 12;
  r.epoch = 3;
  r.T = 4;
  r.batch = 8;
  EvalOutcome& o = r.result;
  o.loss = 0.25;
  o.correct = 3;
  o.count = 5;
  o.accuracy = 0.6;
  o.class_correct = {2, 0, 1};
  o.class_count = {3, 0, 2};
  o.firing_rate = {0.125, 0.5};
  o.layer_names = {"conv_fc.2", "conv_fc.6"};
  return r;
}

TEST(EvalReport, WritesTheDocumentedFile) {
  const std::string path = ::testing::TempDir() + "sm_eval_" + std::to_string(getpid()) + ".h5";
  write_eval_h5(sample_report(), path);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  H5File f = H5File::open(path);
  EXPECT_EQ(f.attr_string("format"), "spikemesh-eval");
  EXPECT_EQ(f.attr_int("format_version"), 1);
  EXPECT_EQ(f.attr_string("checkpoint"), "out/run/ckpt_000000012.h5");
  EXPECT_EQ(f.attr_string("split"), "test");
  EXPECT_EQ(f.attr_string("layout"), "dp=1 tp=1 pp=1");
  EXPECT_EQ(f.attr_int("step"), 12);
  EXPECT_EQ(f.attr_int("num_classes"), 3);
  EXPECT_EQ(f.attr_int("correct"), 3);
  EXPECT_EQ(f.attr_int("count"), 5);
  EXPECT_EQ(f.attr_double("loss"), 0.25);
  EXPECT_EQ(f.attr_double("accuracy"), 0.6);
  Tensor correct = f.read("class/correct", DType::I64), count = f.read("class/count", DType::I64);
  Tensor acc = f.read("class/accuracy", DType::F64), fr = f.read("firing_rate", DType::F64);
  ASSERT_EQ(correct.numel(), 3);
  ASSERT_EQ(count.numel(), 3);
  EXPECT_EQ(correct.data<int64_t>()[0] + correct.data<int64_t>()[2], 3);
  EXPECT_EQ(count.data<int64_t>()[0] + count.data<int64_t>()[2], 5);
  EXPECT_DOUBLE_EQ(acc.data<double>()[0], 2.0 / 3.0);
  EXPECT_TRUE(std::isnan(acc.data<double>()[1]));  // no sample of class 1
  EXPECT_DOUBLE_EQ(acc.data<double>()[2], 0.5);
  ASSERT_EQ(fr.numel(), 2);
  EXPECT_EQ(fr.data<double>()[1], 0.5);
  f.close();
  std::remove(path.c_str());
}

TEST(EvalReport, UnwritablePathIsOneInputErrorNamingIt) {
  const std::string path = "/nonexistent_dir_sm/eval.h5";
  const std::string msg = error_of([&] { write_eval_h5(sample_report(), path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(EvalReport, TableHasSummaryClassesAndLayers) {
  const std::string t = eval_table(sample_report());
  EXPECT_NE(t.find("test split of data.h5, 5 samples: loss 0.250000, accuracy 60.00% (3/5)"), std::string::npos) << t;
  EXPECT_NE(t.find("66.67%"), std::string::npos) << t;
  EXPECT_NE(t.find("conv_fc.6"), std::string::npos) << t;
}

TEST(EvalReport, TomlSubsetKeepsOnlyTheNamedKeys) {
  const std::string kept = toml_subset("model = \"fmnist_csnn\"\nthreads = 64\nvar = [\"C=8\"]\n", {"model", "var"}, "x");
  EXPECT_NE(kept.find("fmnist_csnn"), std::string::npos);
  EXPECT_NE(kept.find("C=8"), std::string::npos);
  EXPECT_EQ(kept.find("threads"), std::string::npos);
  EXPECT_NE(error_of([] { toml_subset("model = = 1", {"model"}, "ckpt.h5: /meta config"); }).find("ckpt.h5"),
            std::string::npos);
}

}  // namespace
}  // namespace sm
