// spike_trains.h — the audio spike datasets SHD and SSC (Cramer et al., "The Heidelberg Spiking
// Data Sets", 2020): one HDF5 file per split holding /spikes/times (variable-length, seconds,
// ascending within a recording), /spikes/units (variable-length, channel ids < 700) and /labels,
// read in blocks of recordings; and the binning of one recording into [T, channels] event
// counts exactly as SpikingJelly 2.0's loaders (spikingjelly.datasets.shd) integrate it:
//  * split_by "number": T segments of N // T events, the last one taking the remainder;
//  * split_by "time": T windows of (t_last - t_first) / T from t_first, each window's events
//    from the first to the last one inside it, the last window running to the end;
//  * dt_ms > 0 (fixed duration): t' = 1000 t - 1000 t_0 (ms), bin k = events with
//    floor(t' / dt_ms) = k, the last bin taking the rest; the first T bins kept, missing ones zero.
// Arithmetic on times is done in the file's own float type, rounding after every operation as
// numpy does (float16 files included), so the window edges are SpikingJelly's to the bit.
// Where SpikingJelly raises (a "time" window with no event; a recording with no events or lasting
// 0 ms under fixed durations) the bins are simply left empty (docs/datasets.md).
// Invariants: every recording read is validated (times finite, >= 0, ascending; as many units as
// times, each < channels; labels in [0, classes)); an Input error names the file and the recording.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sm {

class H5File;

// One recording: times as stored (converted exactly to double) and channel ids.
struct SpikeTrain {
  std::vector<double> t;
  std::vector<int32_t> x;
};

struct SpikeBinning {
  int T = 100;
  std::string split_by = "number";  // number | time (ignored when dt_ms > 0)
  double dt_ms = 0;                 // > 0: fixed-duration bins of dt_ms milliseconds
  int channels = 700;
  int time_bits = 32;               // the file's float width: 16, 32 or 64 (arithmetic precision)
};

// Adds the counts of `s` into `frames` ([T * channels], zeroed by the caller) and returns the
// bins the recording fills: with dt_ms, SpikingJelly's frame count (ceil of its length in ms
// over dt_ms; 0 for no spike or one instant), of which the first T are kept; else T. Local.
int64_t bin_spike_train(const SpikeTrain& s, const SpikeBinning& b, float* frames);

// One published split file, opened and checked (Input errors name it): its recording count and
// time type. read() returns recordings [begin, end) validated against `channels` and labels
// validated against `classes`.
class SpikeTrainFile {
 public:
  SpikeTrainFile(const std::string& path, int channels, int classes);
  ~SpikeTrainFile();
  SpikeTrainFile(const SpikeTrainFile&) = delete;
  SpikeTrainFile& operator=(const SpikeTrainFile&) = delete;
  int64_t size() const { return n_; }
  int time_bits() const { return time_bits_; }
  const std::string& path() const { return path_; }
  void read(int64_t begin, int64_t end, std::vector<SpikeTrain>& out, std::vector<int64_t>& labels) const;

 private:
  std::string path_;
  int channels_, classes_;
  int64_t n_ = 0;
  int time_bits_ = 32;
  std::unique_ptr<H5File> file_;
};

}  // namespace sm
