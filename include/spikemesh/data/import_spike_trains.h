// import_spike_trains.h — `spikemesh data shd | ssc`: the Spiking Heidelberg Digits (20 classes)
// and Spiking Speech Commands (35 classes) published HDF5 files (data/spike_trains.h) binned
// into [T, 1, 1, 700] event counts per recording, SpikingJelly 2.0's way, and written as one
// spikemesh dataset (h5_dataset.h schema, layout NTCHW; SSC's validation split as /valid/x, /valid/y).
// Rank 0 alone (the files are small: SHD 10,420 recordings, SSC 105,829). Invariants: every
// recording is validated before the file appears; the file is written as <out>.tmp and renamed
// only when complete (an existing <out> is replaced only with --overwrite); any error leaves
// nothing behind.
#pragma once
#include <cstdint>
#include <string>

namespace sm {

struct SpikeImportOptions {
  std::string dataset;  // "shd" | "ssc"
  std::string from, out;
  int T = 100;
  std::string split_by = "number";  // number | time (ignored with dt_ms)
  double dt_ms = 0;                 // > 0: fixed-duration bins, the first T kept
  std::string dtype = "u8";         // u8 (counts saturate at 255, counted) | f32
  int deflate = -1;                 // 0: uncompressed; 1..9; -1: 1 for u8, 0 for f32
  bool overwrite = false;
};

struct SpikeImportResult {
  int64_t train = 0, valid = 0, test = 0, spikes = 0, saturated = 0;
  int64_t longest_bins = 0;  // with dt_ms: the most bins a recording fills
  double seconds = 0;
};

SpikeImportResult import_spike_dataset(const SpikeImportOptions& o);

}  // namespace sm
