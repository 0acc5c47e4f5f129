// test_event_frames.cpp — frames made on the fly from stored events (data/event_frames_reader.h):
// `--frames` parsing, the frames of H5Dataset::read against an independent count of the events
// (number split, the stored type's saturation, x_scale), the resize against the double
// reference, and the refusals (no stored events, events off the sensor).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../ref/resize_ref.h"
#include "error_of.h"
#include "spikemesh/data/event_frames_reader.h"
#include "spikemesh/data/event_h5_writer.h"
#include "spikemesh/data/h5_dataset.h"

namespace sm {
namespace {
namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  return (fs::temp_directory_path() / ("sm_event_frames_" + std::to_string(::getpid()) + "_" + name)).string();
}

struct Ev {
  int64_t t;
  uint16_t x, y;
  uint8_t p;
};

// An imported-like file: sensor `hw` x `hw`, frames of `size`, /x of `stored` (its contents are
// not read by --frames), the train samples' events `train` (one vector per sample, labels 0, 1,
// ...), one test sample without events; raw events kept unless `events` is false.
void write_event_file(const std::string& path, int hw, int size, StoredType stored, double x_scale,
                      const std::vector<std::vector<Ev>>& train, bool events = true) {
  EventFileShape shape;
  shape.T = 2;
  shape.height = shape.width = size;
  shape.stored = stored;
  shape.train_rows = static_cast<int64_t>(train.size());
  shape.test_rows = 1;
  shape.events = events;
  EventH5Writer w = EventH5Writer::create(path, nullptr, shape);
  EventRows rows;
  int64_t total = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    rows.rows.push_back(static_cast<int64_t>(i));
    rows.x.resize(rows.x.size() + static_cast<size_t>(w.row_bytes()), 0);
    rows.y.push_back(static_cast<int64_t>(i % 2));
    rows.ev_first.push_back(total);
    rows.ev_count.push_back(static_cast<int64_t>(train[i].size()));
    for (const Ev& e : train[i]) {
      rows.ev_t.push_back(e.t);
      rows.ev_x.push_back(e.x);
      rows.ev_y.push_back(e.y);
      rows.ev_p.push_back(e.p);
    }
    total += static_cast<int64_t>(train[i].size());
  }
  w.write(Split::Train, rows, total);
  EventRows test;
  test.rows = {0};
  test.x.assign(static_cast<size_t>(w.row_bytes()), 0);
  test.y = {1};
  test.ev_first = {0};
  test.ev_count = {0};
  w.write(Split::Test, test, 0);
  w.finish(shape.train_rows, 1, total, 0);
  H5File& f = w.file();
  f.set_attr("num_classes", int64_t(2));
  f.set_attr("layout", "NTCHW");
  f.set_attr("T", int64_t(2));
  f.set_attr("x_scale", x_scale);
  f.set_attr("sensor_h", int64_t(hw));
  f.set_attr("sensor_w", int64_t(hw));
  f.set_attr("size", int64_t(size));
  f.set_attr("dataset", "n-mnist");
  w.close();
}

// Events at pixel (x, y) of polarity p, `n` of them, times from t0.
void add(std::vector<Ev>& v, int n, uint16_t x, uint16_t y, uint8_t p, int64_t t0 = 0) {
  for (int i = 0; i < n; ++i) v.push_back({t0 + static_cast<int64_t>(v.size()), x, y, p});
}

FramesOption frames(const std::string& text) { return parse_frames_option(text); }
}  // namespace

TEST(EventFrames, ParsesTheThreeSplitsAndNamesTheFlagOnErrors) {
  EXPECT_FALSE(frames("").on);
  EXPECT_FALSE(frames("off").on);
  const FramesOption n = frames("16,number"), t = frames("8,time"), d = frames("6,duration:50000");
  EXPECT_TRUE(n.on && n.spec.T == 16 && n.spec.split_by == SplitBy::Number);
  EXPECT_TRUE(t.on && t.spec.T == 8 && t.spec.split_by == SplitBy::Time);
  EXPECT_TRUE(d.on && d.spec.T == 6 && d.spec.split_by == SplitBy::Duration && d.spec.duration_us == 50000);
  for (const char* bad : {"16", "x,number", "0,number", "16,bins", "4,duration:", "4,duration:0", "4,duration:-5",
                          "70000,number"})
    EXPECT_NE(error_of([&] { frames(bad); }).find(std::string("--frames ") + bad), std::string::npos) << bad;
}

TEST(EventFrames, NumberSplitCountsSaturatedAtTheStoredTypeAndScaled) {
  // Sample 0: 300 events at (1, 2) p 0, then 5 at (3, 0) p 1: frames of 152 and 153 events.
  // Sample 1: 600 events at one pixel, 300 per frame: above u8's 255, so stored saturated.
  std::vector<std::vector<Ev>> train(2);
  add(train[0], 300, 1, 2, 0);
  add(train[0], 5, 3, 0, 1);
  add(train[1], 600, 0, 0, 1);
  const std::string path = scratch("number.h5");
  write_event_file(path, 4, 4, StoredType::U8, 0.5, train);
  const FramesOption opt = frames("2,number");
  H5Dataset d = H5Dataset::open(path, nullptr, false, &opt);
  EXPECT_EQ(d.info().T, 2);
  EXPECT_EQ(d.info().sample_shape, (Shape{2, 2, 4, 4}));
  EXPECT_EQ(d.info().frames, "2,number");
  Tensor x, y;
  d.read(Split::Train, {1, 0, 1}, x, y);
  ASSERT_EQ(x.shape(), (Shape{3, 2, 2, 4, 4}));
  // An independent count: frame i = events [i * (n / 2), ...), the last to n; u8: min(count, 255).
  auto expect = [&](const std::vector<Ev>& ev, int64_t k) {
    std::vector<double> want(2 * 2 * 16, 0.0);
    const size_t half = ev.size() / 2;
    for (size_t i = 0; i < ev.size(); ++i)
      want[(i < half ? 0 : 32) + ev[i].p * 16 + ev[i].y * 4 + ev[i].x] += 1;
    for (size_t e = 0; e < want.size(); ++e)
      EXPECT_EQ(x.data<float>()[k * 64 + static_cast<int64_t>(e)], static_cast<float>(std::min(want[e], 255.0) * 0.5))
          << "sample position " << k << " element " << e;
  };
  expect(train[1], 0);
  expect(train[0], 1);
  expect(train[1], 2);
  EXPECT_EQ(y.data<int64_t>()[0], 1);
  EXPECT_EQ(y.data<int64_t>()[1], 0);
  // The test sample has no event: zero frames, as the importer stores them.
  d.read(Split::Test, {0}, x, y);
  for (int64_t e = 0; e < x.numel(); ++e) EXPECT_EQ(x.data<float>()[e], 0.0f);
  fs::remove(path);
}

TEST(EventFrames, ResizedFramesEqualTheDoubleReference) {
  std::vector<std::vector<Ev>> train(1);
  for (int k = 0; k < 40; ++k) add(train[0], 1 + k % 3, static_cast<uint16_t>(k % 8), static_cast<uint16_t>((k * 3) % 8),
                                   static_cast<uint8_t>(k % 2));
  const std::string path = scratch("resize.h5");
  write_event_file(path, 8, 3, StoredType::F32, 1.0, train);
  const FramesOption opt = frames("1,number");
  H5Dataset d = H5Dataset::open(path, nullptr, false, &opt);
  Tensor x, y;
  d.read(Split::Train, {0}, x, y);
  ASSERT_EQ(x.shape(), (Shape{1, 1, 2, 3, 3}));
  std::vector<double> counts(2 * 64, 0.0);
  for (const Ev& e : train[0]) counts[e.p * 64 + e.y * 8 + e.x] += 1;
  const std::vector<double> want = ref::resize_bilinear_aa(counts, 2, 8, 8, 3, 3);
  for (size_t e = 0; e < want.size(); ++e)
    EXPECT_NEAR(x.data<float>()[e], want[e], 1e-5 * (1 + std::fabs(want[e]))) << e;
  fs::remove(path);
}

TEST(EventFrames, RefusesAFileWithoutEventsAndEventsOffTheSensor) {
  std::vector<std::vector<Ev>> train(1);
  add(train[0], 4, 1, 1, 0);
  const std::string no_events = scratch("noev.h5");
  write_event_file(no_events, 4, 4, StoredType::F32, 1.0, train, false);
  const FramesOption opt = frames("2,number");
  const std::string e = error_of([&] { H5Dataset::open(no_events, nullptr, false, &opt); });
  EXPECT_NE(e.find(no_events), std::string::npos) << e;
  EXPECT_NE(e.find("--events"), std::string::npos) << e;
  EXPECT_NE(e.find("--frames 2,number"), std::string::npos) << e;
  fs::remove(no_events);
  add(train[0], 1, 9, 0, 0);  // x = 9 on a 4-pixel-wide sensor: a damaged file
  const std::string damaged = scratch("damaged.h5");
  write_event_file(damaged, 4, 4, StoredType::F32, 1.0, train);
  H5Dataset d = H5Dataset::open(damaged, nullptr, false, &opt);
  Tensor x, y;
  const std::string e2 = error_of([&] { d.read(Split::Train, {0}, x, y); });
  EXPECT_NE(e2.find(damaged), std::string::npos) << e2;
  fs::remove(damaged);
}

}  // namespace sm
