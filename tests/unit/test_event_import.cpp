// test_event_import.cpp — the neuromorphic importers' pieces on hand-made bytes: the four
// event decoders (bit layouts, flips, ignored bits, truncation), SpikingJelly's frame
// integration (number / time / fixed duration; its own unit cases), the anti-aliased resize
// against tests/ref/resize_ref (double precision), the folder listings' order and split, and a
// u16 / f16 dataset written by EventH5Writer read back through H5Dataset. The whole datasets are
// checked against the numpy reference by tests/e2e/event_import.sh.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zip.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../ref/resize_ref.h"
#include "error_of.h"
#include "spikemesh/data/event_datasets.h"
#include "spikemesh/data/event_formats.h"
#include "spikemesh/data/event_h5_writer.h"
#include "spikemesh/data/frame_integration.h"
#include "spikemesh/data/h5_dataset.h"

using namespace sm;
namespace fs = std::filesystem;

namespace {
std::string scratch(const std::string& name) {
  return "/tmp/spikemesh_evt_" + std::to_string(getpid()) + "_" + name;
}
void put(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}
void be32(std::string& s, uint32_t v) {
  for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
}
void le(std::string& s, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
}
EventStream stream(std::vector<int64_t> t, std::vector<int> x, std::vector<int> y, std::vector<int> p) {
  EventStream e;
  for (size_t i = 0; i < t.size(); ++i) e.push(t[i], x[i], y[i], p[i]);
  return e;
}
}  // namespace

TEST(EventFormats, Aedat2AddressBitsFlipsAndHeader) {
  std::string f = "#!AER-DAT2.0\r\n# This is a raw AE data file\r\n  # indented header line\r\n";
  // event 0: raw x (bits 1-7) 5, raw y (bits 8-14) 9, polarity bit 1 -> x = 127-9, y = 127-5, p = 0;
  // junk in bit 15 and bits 16-31 must be ignored.
  be32(f, (9u << 8) | (5u << 1) | 1u | (1u << 15) | 0xABC00000u);
  be32(f, 4000000000u);  // an unsigned timestamp above 2^31
  be32(f, 0u);           // event 1: all zero -> x 127, y 127, p 1
  be32(f, 7u);
  const std::string path = scratch("a2.aedat");
  put(path, f);
  EventStream e = read_event_file(path, EventFileFormat::Aedat2Cifar10Dvs);
  ASSERT_EQ(e.size(), 2);
  EXPECT_EQ(e.x[0], 127 - 9);
  EXPECT_EQ(e.y[0], 127 - 5);
  EXPECT_EQ(e.p[0], 0);
  EXPECT_EQ(e.t[0], 4000000000LL);
  EXPECT_EQ(e.x[1], 127);
  EXPECT_EQ(e.p[1], 1);
  EXPECT_TRUE(e.t_u32);
  EXPECT_EQ(sniff_aedat_version(path), EventFileFormat::Aedat2Cifar10Dvs);
  put(path, f.substr(0, f.size() - 3));
  EXPECT_NE(error_of([&] { read_event_file(path, EventFileFormat::Aedat2Cifar10Dvs); }).find(path + ": truncated"),
            std::string::npos);
  put(path, "\x93NUMPY not an aedat");
  EXPECT_NE(error_of([&] { read_event_file(path, EventFileFormat::Aedat2Cifar10Dvs); }).find("not an AEDAT"),
            std::string::npos);
  fs::remove(path);
}

TEST(EventFormats, Aedat31PacketsOverflowAndSkippedTypes) {
  std::string f = "#!AER-DAT3.1\r\n#Format: RAW\r\n#!END-HEADER\r\n";
  auto header = [&](uint16_t type, uint32_t overflow, uint32_t capacity) {
    le(f, type, 2);
    le(f, 1, 2);
    le(f, 8, 4);
    le(f, 4, 4);
    le(f, overflow, 4);
    le(f, capacity, 4);
    le(f, capacity, 4);
    le(f, capacity, 4);
  };
  header(0, 0, 1);  // a special-event packet: skipped
  le(f, 0xFFFFFFFF, 4);
  le(f, 1, 4);
  header(1, 1, 2);  // polarity, tsOverflow 1
  le(f, (100u << 17) | (20u << 2) | (1u << 1) | 0u, 4);  // valid bit 0: kept all the same
  le(f, 5, 4);
  le(f, (3u << 17) | (127u << 2) | 1u, 4);
  le(f, 6, 4);
  const std::string path = scratch("a31.aedat");
  put(path, f);
  EXPECT_EQ(sniff_aedat_version(path), EventFileFormat::Aedat31);
  EventStream e = read_event_file(path, EventFileFormat::Aedat31);
  ASSERT_EQ(e.size(), 2);
  EXPECT_EQ(e.x[0], 100);
  EXPECT_EQ(e.y[0], 20);
  EXPECT_EQ(e.p[0], 1);
  EXPECT_EQ(e.t[0], 5 + (1LL << 31));
  EXPECT_EQ(e.x[1], 3);
  EXPECT_EQ(e.y[1], 127);
  EXPECT_EQ(e.p[1], 0);
  EXPECT_NE(error_of([&] { check_events_on_sensor(e, 64, 64, path); }).find("event 0 at (x 100, y 20) is outside"),
            std::string::npos);
  put(path, f.substr(0, f.size() - 4));
  EXPECT_NE(error_of([&] { read_event_file(path, EventFileFormat::Aedat31); }).find("truncated AEDAT 3.1 packet"),
            std::string::npos);
  fs::remove(path);
}

TEST(EventFormats, NMnistFortyBitEvents) {
  // SpikingJelly's own case: x 3, y 4, p 1, t 0x12345.
  const std::string path = scratch("n.bin");
  put(path, std::string("\x03\x04\x81\x23\x45", 5));
  EventStream e = read_event_file(path, EventFileFormat::AtisBin);
  ASSERT_EQ(e.size(), 1);
  EXPECT_EQ(e.x[0], 3);
  EXPECT_EQ(e.y[0], 4);
  EXPECT_EQ(e.p[0], 1);
  EXPECT_EQ(e.t[0], 0x12345);
  put(path, std::string("\x03\x04\x81\x23", 4));
  EXPECT_NE(error_of([&] { read_event_file(path, EventFileFormat::AtisBin); }).find("truncated ATIS .bin"),
            std::string::npos);
  fs::remove(path);
}

TEST(EventFormats, NpzOfEitherByteOrderCompressed) {
  auto npy = [](const std::string& descr, const std::vector<uint64_t>& v, int width, bool big) {
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(v.size()) + ",), }";
    while ((10 + h.size() + 1) % 64) h.push_back(' ');
    h.push_back('\n');
    std::string s = std::string("\x93NUMPY\x01\x00", 8);
    le(s, h.size(), 2);
    s += h;
    for (uint64_t x : v)
      for (int b = 0; b < width; ++b) s.push_back(static_cast<char>((x >> (8 * (big ? width - 1 - b : b))) & 0xFF));
    return s;
  };
  const std::string path = scratch("e.npz");
  fs::remove(path);
  std::vector<std::string> members = {npy(">u4", {10, 4000000000u}, 4, true), npy("<u4", {1, 2}, 4, false),
                                      npy("<i8", {3, 4}, 8, false), npy("<i8", {0, 1}, 8, false)};
  const char* names[] = {"t.npy", "x.npy", "y.npy", "p.npy"};
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  ASSERT_NE(z, nullptr);
  for (int i = 0; i < 4; ++i) {
    zip_source_t* src = zip_source_buffer(z, members[i].data(), members[i].size(), 0);
    zip_int64_t k = zip_file_add(z, names[i], src, ZIP_FL_OVERWRITE);
    ASSERT_GE(k, 0);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(k), ZIP_CM_DEFLATE, 6);
  }
  ASSERT_EQ(zip_close(z), 0);
  EventStream e = read_event_file(path, EventFileFormat::Npz);
  ASSERT_EQ(e.size(), 2);
  EXPECT_EQ(e.t[1], 4000000000LL);
  EXPECT_TRUE(e.t_u32);
  EXPECT_EQ(e.x[1], 2);
  EXPECT_EQ(e.y[0], 3);
  EXPECT_EQ(e.p[1], 1);
  put(path, "PK but not a zip");
  EXPECT_NE(error_of([&] { read_event_file(path, EventFileFormat::Npz); }).find("not a readable .npz"),
            std::string::npos);
  fs::remove(path);
}

TEST(FrameIntegration, NumberSplitGivesTheRemainderToTheLastFrame) {
  // 7 events, T 3: frames take [0,2), [2,4), [4,7); channel 0 counts p == 0; pixel [y][x].
  EventStream e = stream({0, 1, 2, 3, 4, 5, 6}, {0, 1, 0, 1, 0, 1, 1}, {0, 0, 1, 1, 0, 0, 0}, {0, 1, 0, 1, 0, 0, 1});
  FrameSpec spec;
  spec.T = 3;
  spec.height = spec.width = 2;
  std::vector<float> f(3 * 2 * 4);
  EXPECT_EQ(integrate_frames(e, 0, e.size(), spec, f.data(), "t"), 3);
  auto at = [&](int t, int c, int y, int x) { return f[((t * 2 + c) * 2 + y) * 2 + x]; };
  EXPECT_EQ(at(0, 0, 0, 0), 1);
  EXPECT_EQ(at(0, 1, 0, 1), 1);
  EXPECT_EQ(at(1, 0, 1, 0), 1);
  EXPECT_EQ(at(1, 1, 1, 1), 1);
  EXPECT_EQ(at(2, 0, 0, 0), 1);
  EXPECT_EQ(at(2, 0, 0, 1), 1);
  EXPECT_EQ(at(2, 1, 0, 1), 1);
  double total = 0;
  for (float v : f) total += v;
  EXPECT_EQ(total, 7);
}

TEST(FrameIntegration, TimeSplitAsSpikingJellysUnitCaseAndEmptyBins) {
  // SpikingJelly: t = [0, 1, 2, 3], T 2 -> j_l = [0, 1], j_r = [1, 4].
  EventStream e = stream({0, 1, 2, 3}, {0, 1, 1, 1}, {0, 0, 0, 0}, {0, 0, 0, 0});
  FrameSpec spec;
  spec.T = 2;
  spec.split_by = SplitBy::Time;
  spec.height = 1;
  spec.width = 2;
  std::vector<float> f(2 * 2 * 2);
  integrate_frames(e, 0, e.size(), spec, f.data(), "t");
  EXPECT_EQ(f[0], 1);  // frame 0, channel 0, x 0
  EXPECT_EQ(f[1], 0);
  EXPECT_EQ(f[4], 0);  // frame 1, channel 0, x 0
  EXPECT_EQ(f[5], 3);
  EventStream gap = stream({0, 1, 100}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0});
  spec.T = 4;
  std::vector<float> g(4 * 2 * 2);
  EXPECT_NE(error_of([&] { integrate_frames(gap, 0, gap.size(), spec, g.data(), "f.aedat"); }).find("f.aedat: --split-by time: frame 1"),
            std::string::npos);
}

TEST(FrameIntegration, FixedDurationGridFromTheFirstEvent) {
  // t - min = [0, 5, 10, 25], D 10: ceil(25 / 10) = 3 frames [0,10), [10,20), rest; T 2 keeps 2.
  EventStream e = stream({100, 105, 110, 125}, {0, 0, 0, 0}, {0, 0, 0, 0}, {1, 1, 1, 1});
  FrameSpec spec;
  spec.T = 2;
  spec.split_by = SplitBy::Duration;
  spec.duration_us = 10;
  spec.height = spec.width = 1;
  std::vector<float> f(2 * 2);
  EXPECT_EQ(integrate_frames(e, 0, e.size(), spec, f.data(), "t"), 3);
  EXPECT_EQ(f[1], 2);  // frame 0, channel 1
  EXPECT_EQ(f[3], 1);  // frame 1, channel 1
}

TEST(FrameIntegration, AntialiasedResizeEqualsTheDoubleReference) {
  // [h, w] -> [oh, ow]: square sensors, N-Caltech101's 180 x 240 to a square and to its own shape
  struct Case { int h, w, oh, ow; };
  for (const Case k : {Case{128, 128, 48, 48}, Case{34, 34, 48, 48}, Case{20, 20, 7, 7}, Case{180, 240, 48, 48},
                       Case{180, 240, 64, 96}, Case{18, 24, 30, 11}}) {
    std::vector<float> in(static_cast<size_t>(3 * k.h * k.w));
    std::vector<double> ind(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(ind[i] = static_cast<double>((i * 7919) % 13));
    std::vector<float> out(static_cast<size_t>(3 * k.oh * k.ow));
    resize_bilinear_aa(in.data(), 3, k.h, k.w, k.oh, k.ow, out.data());
    const std::vector<double> ref = ref::resize_bilinear_aa(ind, 3, k.h, k.w, k.oh, k.ow);
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (1 + std::fabs(ref[i])));
    // f32 weights as torch computes them: center = scale * (i + 0.5) carries ~eps * in of error
    EXPECT_LT(worst, 2e-5) << k.h << "x" << k.w << " -> " << k.oh << "x" << k.ow;
  }
}

TEST(EventDatasets, CifarOrderIsStringOrderAndTheSplitIsCeilPerClass) {
  const std::string root = scratch("c10");
  for (const char* c : {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"})
    for (int i = 0; i < 12; ++i) put(root + "/" + c + "/cifar10_" + c + "_" + std::to_string(i) + ".aedat", "#\r\n");
  put(root + "/cat/README.txt", "not an event file");
  EventDatasetLayout L = list_cifar10dvs(root, 0.75);
  EXPECT_EQ(L.train_size, 90);  // ceil(12 * 0.75) = 9 per class
  EXPECT_EQ(L.test_size, 30);
  const std::vector<std::string> first = {"cifar10_airplane_0", "cifar10_airplane_1", "cifar10_airplane_10",
                                          "cifar10_airplane_11", "cifar10_airplane_2"};
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(L.samples[i].name, first[i]);
  EXPECT_EQ(L.samples[9].label, 1);                       // automobile after 9 airplanes
  EXPECT_EQ(L.samples[90].name, "cifar10_airplane_7");    // test: airplane's last 3 in string order
  EXPECT_EQ(L.samples[90].split, Split::Test);
  // Fixed-duration frame files are <stem>_<frames>.npz: "_1_" sorts after "_10_" and "_11_".
  EventDatasetLayout D = list_cifar10dvs(root, 0.75, true);
  const std::vector<std::string> dfirst = {"cifar10_airplane_0", "cifar10_airplane_10", "cifar10_airplane_11",
                                           "cifar10_airplane_1", "cifar10_airplane_2"};
  for (size_t i = 0; i < dfirst.size(); ++i) EXPECT_EQ(D.samples[i].name, dfirst[i]);
  fs::remove_all(root + "/dog");
  EXPECT_NE(error_of([&] { list_cifar10dvs(root, 0.9); }).find("missing dog"), std::string::npos);
  fs::create_directories(root + "/dog");
  EXPECT_NE(error_of([&] { list_cifar10dvs(root, 0.9); }).find("empty class"), std::string::npos);
  fs::remove_all(root);
}

TEST(EventDatasets, NCaltechClassesAreSortedFoldersWithoutTheBackgroundUnlessAsked) {
  const std::string top = scratch("ncal"), root = top + "/Caltech101";
  const int per_class[] = {3, 11, 5, 4};  // Faces_easy, BACKGROUND_Google, accordion, airplanes
  const char* classes[] = {"Faces_easy", "BACKGROUND_Google", "accordion", "airplanes"};
  for (int c = 0; c < 4; ++c)
    for (int i = 1; i <= per_class[c]; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "image_%04d.bin", i);
      put(root + "/" + classes[c] + "/" + name, "");
    }
  put(root + "/accordion/Thumbs.db", "not an event file");
  fs::create_directories(top + "/Caltech101_annotations/accordion");  // the archive's other folder: no .bin
  put(top + "/Caltech101_annotations/accordion/annotation_0001.mat", "");
  // --from the folder above Caltech101: descends into it; upper-case folders sort first
  const EventDatasetLayout L = list_ncaltech101(top, 0.5);
  EXPECT_EQ(L.dataset, "n-caltech101");
  EXPECT_EQ(L.root, root);
  EXPECT_EQ(L.sensor_h, 180);
  EXPECT_EQ(L.sensor_w, 240);
  EXPECT_EQ(L.class_names, (std::vector<std::string>{"Faces_easy", "accordion", "airplanes"}));
  EXPECT_EQ(L.train_size, 2 + 3 + 2);  // ceil(n * 0.5) of 3, 5, 4
  EXPECT_EQ(L.test_size, 1 + 2 + 2);
  EXPECT_EQ(L.files[0], "Faces_easy/image_0001.bin");
  EXPECT_EQ(L.samples[2].name, "image_0001");  // accordion's first, label 1
  EXPECT_EQ(L.samples[2].label, 1);
  EXPECT_EQ(L.samples[7].split, Split::Test);  // Faces_easy's last
  EXPECT_EQ(L.files[static_cast<size_t>(L.samples[7].file)], "Faces_easy/image_0003.bin");
  EXPECT_EQ(L.formats[0], EventFileFormat::AtisBin);
  // --include-background: SpikingJelly's classes, BACKGROUND_Google label 0 (it sorts first)
  const EventDatasetLayout B = list_event_dataset("n-caltech101", root, 0.9, false, true);
  EXPECT_EQ(B.class_names.size(), 4u);
  EXPECT_EQ(B.class_names[0], "BACKGROUND_Google");
  EXPECT_EQ(B.train_size, 10 + 3 + 5 + 4);  // ceil(11 * 0.9) = 10, ceil(3 * 0.9) = 3, ...
  EXPECT_EQ(B.samples[1].name, "image_0002");
  EXPECT_EQ(B.samples[10].label, 1);
  EXPECT_EQ(B.samples[B.train_size].name, "image_0011");  // the background's last is the first test sample
  // bad input: an empty class, no class folder at all, a bad ratio
  fs::create_directories(root + "/anchor");
  EXPECT_NE(error_of([&] { list_ncaltech101(root, 0.9); }).find("anchor: empty class"), std::string::npos);
  EXPECT_NE(error_of([&] { list_ncaltech101(top + "/Caltech101_annotations", 0.9); }).find("expected N-Caltech101"),
            std::string::npos);
  EXPECT_NE(error_of([&] { list_ncaltech101(root, 1.0); }).find("--train-ratio"), std::string::npos);
  fs::remove_all(top);
}

TEST(EventDatasets, GestureLabelsFollowTheStringOrderOfTheClassFolders) {
  const std::string root = scratch("gest");
  put(root + "/trials_to_train.txt", "user01_led.aedat\n\n");
  put(root + "/trials_to_test.txt", "user02_led.aedat\n");
  put(root + "/user01_led.aedat", "#!AER-DAT3.1\r\n#!END-HEADER\r\n");
  put(root + "/user02_led.aedat", "#!AER-DAT3.1\r\n#!END-HEADER\r\n");
  std::string rest;  // classes 2 and 4..10 once each, after the interesting rows
  for (int c : {2, 4, 5, 6, 7, 8, 9, 10}) rest += std::to_string(c) + "," + std::to_string(100 * c) + "," + std::to_string(100 * c + 50) + "\n";
  put(root + "/user01_led_labels.csv", "class,startTime_usec,endTime_usec\n11,0,10\n3,10,20\n3,20,30\n1,5,8\n" + rest);
  put(root + "/user02_led_labels.csv", "class,startTime_usec,endTime_usec\n1,0,1\n3,0,1\n11,0,10\n" + rest);
  EventDatasetLayout L = list_dvs128_gesture(root);
  ASSERT_EQ(L.train_size, 12);
  // folders "0","1","10","2",...: csv class 1 -> label 0, class 2 -> 1, class 11 (folder 10) -> 2,
  // class 3 (folder 2) -> 3 (two samples: _0 and _1)
  EXPECT_EQ(L.samples[0].label, 0);
  EXPECT_EQ(L.samples[1].label, 1);
  EXPECT_EQ(L.samples[2].label, 2);
  EXPECT_EQ(L.samples[2].t_begin, 0);
  EXPECT_EQ(L.samples[3].name, "user01_led_0");
  EXPECT_EQ(L.samples[3].label, 3);
  EXPECT_EQ(L.samples[4].name, "user01_led_1");
  EXPECT_EQ(L.samples[4].t_begin, 20);
  EXPECT_EQ(L.class_names[2], "other_gestures");
  put(root + "/user02_led_labels.csv", "class,startTime_usec,endTime_usec\n1,0,1\n" + rest);
  EXPECT_NE(error_of([&] { list_dvs128_gesture(root); }).find("empty class"), std::string::npos);
  put(root + "/trials_to_test.txt", "user03_led.aedat\n");
  EXPECT_NE(error_of([&] { list_dvs128_gesture(root); }).find("trials_to_test.txt:1 names user03_led.aedat"),
            std::string::npos);
  fs::remove_all(root);
}

TEST(EventH5Writer, U16AndF16FramesReadBackAsFloat) {
  for (StoredType t : {StoredType::U16, StoredType::F16}) {
    const std::string path = scratch(std::string("w_") + stored_type_name(t) + ".h5");
    EventFileShape shape;
    shape.T = 1;
    shape.height = shape.width = 2;
    shape.stored = t;
    shape.train_rows = 2;
    shape.test_rows = 1;
    EventH5Writer w = EventH5Writer::create(path, nullptr, shape);
    const std::vector<float> values = {0, 1, 2.5f, 300, 1000, 65504, 7, 8};  // one row: [T 1, 2, 2, 2]
    EventRows rows;
    rows.rows = {0, 1};
    for (int r = 0; r < 2; ++r)
      for (float v : values) {
        if (t == StoredType::U16) {
          const uint16_t u = static_cast<uint16_t>(v + r);
          rows.x.insert(rows.x.end(), reinterpret_cast<const uint8_t*>(&u), reinterpret_cast<const uint8_t*>(&u) + 2);
        } else {
          Tensor h = Tensor::full({1}, v, DType::F32).to_dtype(DType::F16);
          rows.x.insert(rows.x.end(), static_cast<const uint8_t*>(h.raw()), static_cast<const uint8_t*>(h.raw()) + 2);
        }
      }
    rows.y = {1, 0};
    rows.n_frames = {1, 1};
    w.write(Split::Train, rows, 0);
    EventRows test;
    test.rows = {0};
    test.x.assign(values.size() * 2, 0);
    test.y = {1};
    test.n_frames = {1};
    w.write(Split::Test, test, 0);
    w.finish(2, 1, 0, 0);
    w.file().set_attr("num_classes", int64_t(2));
    w.file().set_attr("layout", "NTCHW");
    w.file().set_attr("T", int64_t(1));
    w.close();
    H5Dataset d = H5Dataset::open(path);
    EXPECT_EQ(d.info().stored_name, stored_type_name(t));
    Tensor x, y;
    d.read(Split::Train, {1, 0}, x, y);
    ASSERT_EQ(x.numel(), 16);
    const float expect_r1 = t == StoredType::U16 ? 301 : 300;
    EXPECT_EQ(x.data<float>()[3], expect_r1);  // row 1 first (the order asked), value 300 (+1 in u16)
    EXPECT_EQ(x.data<float>()[8 + 2], t == StoredType::U16 ? 2.0f : 2.5f);  // row 0: 2.5 is exact in f16
    EXPECT_EQ(y.data<int64_t>()[0], 0);
    fs::remove(path);
  }
}

TEST(EventH5Writer, FramesToStoredRoundsAndCountsSaturation) {
  const float v[] = {0.0f, 2.5f, 3.5f, 254.6f, 300.0f, 70000.0f};
  std::vector<uint8_t> out;
  EXPECT_EQ(frames_to_stored(v, 6, StoredType::U8, out), 2);  // 300 and 70000 clip to 255
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end()), (std::vector<uint8_t>{0, 2, 4, 255, 255, 255}));  // half to even
  EXPECT_EQ(frames_to_stored(v, 6, StoredType::U16, out), 1);  // 70000 clips to 65535
  uint16_t last;
  std::memcpy(&last, out.data() + 10, 2);
  EXPECT_EQ(last, 65535);
  EXPECT_EQ(frames_to_stored(v, 6, StoredType::F16, out), 1);  // 70000 clips to 65504
  EXPECT_EQ(frames_to_stored(v, 6, StoredType::F32, out), 0);
  EXPECT_EQ(out.size(), 24u);
}
