// test_metrics.cpp — the metrics writer (io/metrics.h): one row per logged step in every
// /step column, /eval columns, firing-rate matrices with their layer_names attribute, the file
// readable after close and after periodic flushes, and resume truncation (rows after the
// checkpoint's step dropped before appending). The schema written by a real training run is
// checked in test_trainer.cpp.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "spikemesh/io/h5file.h"
#include "spikemesh/io/metrics.h"

namespace sm {
namespace {

std::string tmp(const std::string& tag) {
  return ::testing::TempDir() + "sm_metrics_" + std::to_string(getpid()) + "_" + tag + ".h5";
}

std::vector<double> column(const std::string& path, const std::string& name) {
  H5File f = H5File::open(path);
  Tensor t = f.read(name, DType::F64);
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

std::string string_attr(const std::string& path, const std::string& ds, const std::string& key) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0);
  std::string out;
  if (H5Aexists(d, key.c_str()) > 0) {
    hid_t a = H5Aopen(d, key.c_str(), H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    if (H5Tis_variable_str(t) > 0) {
      char* s = nullptr;
      hid_t mt = H5Tcopy(H5T_C_S1);
      H5Tset_size(mt, H5T_VARIABLE);
      H5Tset_cset(mt, H5Tget_cset(t));
      H5Aread(a, mt, &s);
      if (s) out = s;
      H5free_memory(s);
      H5Tclose(mt);
    } else {
      std::vector<char> buf(H5Tget_size(t) + 1, 0);
      H5Aread(a, t, buf.data());
      out = buf.data();
    }
    H5Tclose(t);
    H5Aclose(a);
  }
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

void log_steps(MetricsWriter& w, int from, int to, double tag) {
  for (int s = from; s <= to; ++s)
    w.log_step({{"step", double(s)}, {"loss", tag + s}, {"lr", 0.1 * s}},
               {0.01 * s, 0.02 * s, tag}, {"a.lif", "b.lif", "c.lif"});
}

}  // namespace

TEST(Metrics, OneRowPerStepAndEvalWithFiringRateNames) {
  std::string p = tmp("rows");
  {
    MetricsWriter w(p, -1, /*flush_every=*/3);
    log_steps(w, 1, 7, 100.0);
    w.log_eval(4, 0, 0.5, 0.25, {0.1, 0.2, 0.3}, {"a.lif", "b.lif", "c.lif"});
    w.log_eval(7, 1, 0.4, 0.75, {0.4, 0.5, 0.6}, {"a.lif", "b.lif", "c.lif"});
  }  // closed: every buffered row flushed
  EXPECT_EQ(column(p, "/step/step"), (std::vector<double>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(column(p, "/step/loss"), (std::vector<double>{101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(column(p, "/step/lr").size(), 7u);
  H5File f = H5File::open(p);
  EXPECT_EQ(f.dataset_shape("/step/firing_rate"), (Shape{7, 3}));
  Tensor fr = f.read("/step/firing_rate", DType::F64);
  EXPECT_DOUBLE_EQ(fr.data<double>()[5 * 3 + 1], 0.02 * 6);  // row of step 6, layer 1
  EXPECT_EQ(column(p, "/eval/step"), (std::vector<double>{4, 7}));
  EXPECT_EQ(column(p, "/eval/epoch"), (std::vector<double>{0, 1}));
  EXPECT_EQ(column(p, "/eval/loss"), (std::vector<double>{0.5, 0.4}));
  EXPECT_EQ(column(p, "/eval/accuracy"), (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(f.dataset_shape("/eval/firing_rate"), (Shape{2, 3}));
  EXPECT_EQ(column(p, "/eval/firing_rate"), (std::vector<double>{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}));
  EXPECT_EQ(string_attr(p, "/step/firing_rate", "layer_names"), "a.lif,b.lif,c.lif");
  EXPECT_EQ(string_attr(p, "/eval/firing_rate", "layer_names"), "a.lif,b.lif,c.lif");
  std::remove(p.c_str());
}

TEST(Metrics, ExplicitFlushMakesRowsVisibleToOtherReaders) {
  std::string p = tmp("flush");
  MetricsWriter w(p, -1, /*flush_every=*/1000);
  log_steps(w, 1, 5, 0.0);
  w.flush();
  // Read the file through a second, independent copy (the writer still holds it open).
  std::string copy = tmp("flush_copy");
  {
    std::FILE* in = std::fopen(p.c_str(), "rb");
    std::FILE* out = std::fopen(copy.c_str(), "wb");
    ASSERT_TRUE(in && out);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, in)) > 0) std::fwrite(buf, 1, n, out);
    std::fclose(in);
    std::fclose(out);
  }
  EXPECT_EQ(column(copy, "/step/step"), (std::vector<double>{1, 2, 3, 4, 5}));
  std::remove(copy.c_str());
  std::remove(p.c_str());
}

TEST(Metrics, ResumeDropsRowsAfterTheCheckpointStepThenAppends) {
  std::string p = tmp("resume");
  {
    MetricsWriter w(p, -1, 4);
    log_steps(w, 1, 10, 100.0);
    w.log_eval(4, 0, 1.0, 0.1, {1, 2, 3}, {"a.lif", "b.lif", "c.lif"});
    w.log_eval(8, 1, 2.0, 0.2, {4, 5, 6}, {"a.lif", "b.lif", "c.lif"});
  }
  {
    MetricsWriter w(p, /*resume_step=*/6, 4);
    log_steps(w, 7, 9, 200.0);  // the resumed run's own values for steps 7..9
    w.log_eval(8, 1, 3.0, 0.3, {7, 8, 9}, {"a.lif", "b.lif", "c.lif"});
  }
  EXPECT_EQ(column(p, "/step/step"), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(column(p, "/step/loss"), (std::vector<double>{101, 102, 103, 104, 105, 106, 207, 208, 209}));
  EXPECT_EQ(column(p, "/step/lr").size(), 9u);
  H5File f = H5File::open(p);
  EXPECT_EQ(f.dataset_shape("/step/firing_rate"), (Shape{9, 3}));
  std::vector<double> fr = column(p, "/step/firing_rate");
  EXPECT_DOUBLE_EQ(fr[5 * 3 + 2], 100.0);  // step 6: first run
  EXPECT_DOUBLE_EQ(fr[6 * 3 + 2], 200.0);  // step 7: resumed run
  EXPECT_EQ(column(p, "/eval/step"), (std::vector<double>{4, 8}));
  EXPECT_EQ(column(p, "/eval/loss"), (std::vector<double>{1.0, 3.0}));
  EXPECT_EQ(f.dataset_shape("/eval/firing_rate"), (Shape{2, 3}));
  EXPECT_EQ(column(p, "/eval/firing_rate"), (std::vector<double>{1, 2, 3, 7, 8, 9}));
  std::remove(p.c_str());
}

TEST(Metrics, ResumeWithoutAFileStartsFreshAndFreshReplaces) {
  std::string p = tmp("fresh");
  std::remove(p.c_str());
  {
    MetricsWriter w(p, /*resume_step=*/5);  // no file yet: a new one
    log_steps(w, 6, 7, 0.0);
  }
  EXPECT_EQ(column(p, "/step/step"), (std::vector<double>{6, 7}));
  {
    MetricsWriter w(p, -1);  // a new run replaces the old file
    log_steps(w, 1, 1, 0.0);
  }
  EXPECT_EQ(column(p, "/step/step"), (std::vector<double>{1}));
  std::remove(p.c_str());
}

}  // namespace sm
