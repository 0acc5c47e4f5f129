// fuzz_event_files.cpp — libFuzzer harness for the event-file decoders and frame integration
// (src/data/event_formats.cpp read_event_file / sniff_aedat_version, src/data/npz_reader.cpp,
// src/data/frame_integration.cpp). Input byte 0 picks the format (AEDAT 2.0, AEDAT 3.1, N-MNIST
// .bin, .npz) and the integration (number / time / duration, T 1..8); the rest is the file.
// Expected outcomes: events or sm::Error. Properties of decoded events: x, y, p and t have one
// entry per event and p is 0/1; events on the sensor integrate (or sm::Error for an empty time
// bin) into frames of non-negative counts that sum to the number of events (split_by number, and
// time when the timestamps are sorted), at most that many (duration: the first T grid frames).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "spikemesh/data/event_formats.h"
#include "spikemesh/data/frame_integration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (fuzz::quiet_logs(), true);
  (void)quiet;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  static const std::string path = fuzz::scratch_path("fuzz_event_file");
  fuzz::write_file(path, data + 1, size - 1);
  const sm::EventFileFormat formats[] = {sm::EventFileFormat::Aedat2Cifar10Dvs, sm::EventFileFormat::Aedat31,
                                         sm::EventFileFormat::AtisBin, sm::EventFileFormat::Npz};
  const sm::EventFileFormat format = formats[mode % 4];
  sm::EventStream ev;
  if (!fuzz::expect_ok_or_input_error([&] {
        if (format == sm::EventFileFormat::Aedat2Cifar10Dvs || format == sm::EventFileFormat::Aedat31)
          (void)sm::sniff_aedat_version(path);
        ev = sm::read_event_file(path, format);
      }))
    return 0;
  const size_t n = ev.t.size();
  if (ev.x.size() != n || ev.y.size() != n || ev.p.size() != n) fuzz::fail("event arrays of different lengths");
  for (uint8_t p : ev.p)
    if (p > 1) fuzz::fail("polarity not 0/1");
  const int side = format == sm::EventFileFormat::AtisBin ? 34 : 128;
  if (!fuzz::expect_ok_or_input_error([&] { sm::check_events_on_sensor(ev, side, side, path); })) return 0;
  sm::FrameSpec spec;
  spec.T = 1 + (mode >> 2) % 8;
  spec.split_by = (mode >> 5) % 3 == 0 ? sm::SplitBy::Number : (mode >> 5) % 3 == 1 ? sm::SplitBy::Time
                                                                                   : sm::SplitBy::Duration;
  spec.duration_us = 1 + (mode >> 6) * 1000;
  spec.height = spec.width = side;
  std::vector<float> frames(static_cast<size_t>(spec.T) * 2 * side * side);
  int64_t got = 0;
  if (!fuzz::expect_ok_or_input_error([&] { got = sm::integrate_frames(ev, 0, ev.size(), spec, frames.data(), path); }))
    return 0;
  double total = 0;
  for (float v : frames) {
    if (!(v >= 0) || !std::isfinite(v)) fuzz::fail("a negative or non-finite count");
    total += v;
  }
  // SpikingJelly's time bins are index ranges between the first and last event in each bin: with
  // timestamps out of order they may skip or repeat events, so the total is n only for sorted t.
  const bool sorted = std::is_sorted(ev.t.begin(), ev.t.end());
  if ((spec.split_by == sm::SplitBy::Number || (spec.split_by == sm::SplitBy::Time && sorted)) &&
      total != static_cast<double>(n))
    fuzz::fail("frames count " + std::to_string(total) + " events of " + std::to_string(n));
  if (spec.split_by == sm::SplitBy::Duration && (got < 1 || total > static_cast<double>(n)))
    fuzz::fail("duration frames: more counts than events");
  return 0;
}
