// spike_trains.cpp — SHD/SSC files and SpikingJelly's binning of a recording
// (data/spike_trains.h). The window arithmetic runs in the file's float type through Real, which
// rounds after every operation as numpy does: float16 computed in float and rounded to half,
// float32 in float, float64 in double.
#include "spikemesh/data/spike_trains.h"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/float_bits.h"
#include "spikemesh/io/h5file.h"

namespace sm {

namespace {

// A value of the file's float type; every operation rounds to it.
struct Real {
  double v = 0;
  int bits = 32;
  Real(double value, int b)
      : v(b == 16 ? round_float_to_half(static_cast<float>(value)) : b == 32 ? static_cast<float>(value) : value), bits(b) {}
  Real make(double value) const { return Real(value, bits); }
  Real op(char o, const Real& r) const {
    if (bits == 64) return make(o == '+' ? v + r.v : o == '-' ? v - r.v : o == '*' ? v * r.v : v / r.v);
    const float a = static_cast<float>(v), b = static_cast<float>(r.v);
    return make(o == '+' ? a + b : o == '-' ? a - b : o == '*' ? a * b : a / b);
  }
  // numpy's floor_divide of non-negative floats (npy_divmod): fmod, then the rounded quotient
  Real floor_div(const Real& r) const {
    if (bits == 64) {
      const double mod = std::fmod(v, r.v), div = (v - mod) / r.v;
      double q = std::floor(div);
      if (div - q > 0.5) q += 1;
      return make(q);
    }
    const float a = static_cast<float>(v), b = static_cast<float>(r.v);
    const float mod = std::fmod(a, b), div = (a - mod) / b;
    float q = std::floor(div);
    if (div - q > 0.5f) q += 1;
    return make(q);
  }
};

void add_counts(const SpikeTrain& s, int64_t from, int64_t to, float* frame) {
  for (int64_t k = from; k < to; ++k) frame[s.x[static_cast<size_t>(k)]] += 1.0f;
}

void bin_by_number(const SpikeTrain& s, const SpikeBinning& b, float* frames) {
  const int64_t n = static_cast<int64_t>(s.t.size()), di = n / b.T;
  for (int i = 0; i < b.T; ++i) {
    const int64_t l = i * di, r = i == b.T - 1 ? n : l + di;
    add_counts(s, l, r, frames + static_cast<int64_t>(i) * b.channels);
  }
}

void bin_by_time(const SpikeTrain& s, const SpikeBinning& b, float* frames) {
  const int64_t n = static_cast<int64_t>(s.t.size());
  if (n == 0) return;  // SpikingJelly: an IndexError
  const Real t0(s.t.front(), b.time_bits), dt = Real(s.t.back(), b.time_bits).op('-', t0).op('/', t0.make(b.T));
  for (int i = 0; i < b.T; ++i) {
    const Real tl = dt.op('*', t0.make(i)).op('+', t0), tr = tl.op('+', dt);
    // the window's events: the first and the last one with tl <= t < tr (times ascend)
    const auto first = std::lower_bound(s.t.begin(), s.t.end(), tl.v);
    const auto last = std::lower_bound(first, s.t.end(), tr.v);
    // An empty window is an IndexError in SpikingJelly: spikemesh leaves it empty, except the
    // last one, which still runs from its start to the end.
    if (first == last && (i < b.T - 1 || first == s.t.end())) continue;
    const int64_t l = first - s.t.begin(), r = i == b.T - 1 ? n : last - s.t.begin();
    add_counts(s, l, r, frames + static_cast<int64_t>(i) * b.channels);
  }
}

// Each event's fixed-duration bin (floor(t' / dt), t' = 1000 t - 1000 t_0 in the file's type),
// and the recording's bin count; the last bin takes every later event.
// A quotient of the file's type as a bin index; Input error when it overflowed (a half's 65504).
int64_t bin_index(double q, const SpikeBinning& b) {
  if (!std::isfinite(q) || q > 4.0e18)
    SM_INPUT_ERROR("--dt-ms " << b.dt_ms << ": a recording's time / --dt-ms overflows the file's " << b.time_bits
                              << "-bit floats (SpikingJelly fails there too): use a larger --dt-ms");
  return static_cast<int64_t>(q);
}

std::vector<int64_t> duration_bins(const SpikeTrain& s, const SpikeBinning& b, int64_t* frames_num) {
  const Real thousand(1000.0, b.time_bits), dur(b.dt_ms, b.time_bits);
  if (!(dur.v > 0)) SM_INPUT_ERROR("--dt-ms " << b.dt_ms << " is 0 in the file's " << b.time_bits << "-bit floats");
  const Real first = thousand.op('*', Real(s.t.front(), b.time_bits));
  std::vector<int64_t> bin(s.t.size());
  Real last = first;
  for (size_t k = 0; k < s.t.size(); ++k) {
    const Real tk = thousand.op('*', Real(s.t[k], b.time_bits)).op('-', first);
    bin[k] = bin_index(tk.floor_div(dur).v, b);
    last = tk;
  }
  *frames_num = bin_index(std::ceil(last.op('/', dur).v), b);
  return bin;
}

// Returns the bins the recording fills (SpikingJelly's frame count), T or not.
int64_t bin_by_duration(const SpikeTrain& s, const SpikeBinning& b, float* frames) {
  if (s.t.empty()) return 0;  // SpikingJelly: an IndexError
  int64_t frames_num = 0;
  const std::vector<int64_t> bin = duration_bins(s, b, &frames_num);
  if (frames_num == 0) return 0;  // a recording of one instant (SpikingJelly: an IndexError)
  int64_t left = 0;
  const int64_t n = static_cast<int64_t>(bin.size()), kept = std::min<int64_t>(frames_num, b.T);
  for (int64_t i = 0; i < kept; ++i) {
    const int64_t right = i == frames_num - 1 ? n : std::lower_bound(bin.begin() + left, bin.end(), i + 1) - bin.begin();
    add_counts(s, left, right, frames + i * b.channels);
    left = right;
  }
  return frames_num;
}

}  // namespace

int64_t bin_spike_train(const SpikeTrain& s, const SpikeBinning& b, float* frames) {
  if (b.dt_ms > 0) return bin_by_duration(s, b, frames);
  if (b.split_by == "time") bin_by_time(s, b, frames);
  else bin_by_number(s, b, frames);
  return b.T;
}

// ---- the published files -------------------------------------------------------------------------

namespace {
// The base type of a variable-length dataset (Input error naming the file otherwise).
H5Handle vlen_base(const std::string& path, hid_t ds, const char* name, H5T_class_t want) {
  H5Handle type(SM_H5_CHECK(H5Dget_type(ds)), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_VLEN)
    SM_INPUT_ERROR(path << ": /spikes/" << name << " is not a variable-length dataset (a SHD/SSC file?)");
  H5Handle base(SM_H5_CHECK(H5Tget_super(type.get())), H5Tclose);
  if (H5Tget_class(base.get()) != want)
    SM_INPUT_ERROR(path << ": /spikes/" << name << " holds " << (want == H5T_FLOAT ? "no floats" : "no integers"));
  return base;
}

int64_t length_of(hid_t ds) {
  H5Handle space(SM_H5_CHECK(H5Dget_space(ds)), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.get()) != 1) return -1;
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  return static_cast<int64_t>(n);
}

// Reads rows [begin, end) of a 1-d dataset `ds` with memory type `mem` into `out`.
void read_rows(hid_t ds, hid_t mem, int64_t begin, int64_t end, void* out) {
  H5Handle fs(SM_H5_CHECK(H5Dget_space(ds)), H5Sclose);
  const hsize_t start = static_cast<hsize_t>(begin), count = static_cast<hsize_t>(end - begin);
  SM_H5_CHECK(H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr));
  H5Handle ms(SM_H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
  SM_H5_CHECK(H5Dread(ds, mem, ms.get(), fs.get(), H5P_DEFAULT, out));
}
}  // namespace

SpikeTrainFile::SpikeTrainFile(const std::string& path, int channels, int classes)
    : path_(path), channels_(channels), classes_(classes) {
  file_ = std::make_unique<H5File>(H5File::open(path));  // Input error naming a missing or damaged file
  for (const char* name : {"spikes/times", "spikes/units", "labels"})
    if (!file_->has_dataset(name)) SM_INPUT_ERROR(path << ": no /" << name << " (a SHD/SSC file?)");
  H5Handle times(SM_H5_CHECK(H5Dopen2(file_->id(), "spikes/times", H5P_DEFAULT)), H5Dclose);
  H5Handle units(SM_H5_CHECK(H5Dopen2(file_->id(), "spikes/units", H5P_DEFAULT)), H5Dclose);
  H5Handle labels(SM_H5_CHECK(H5Dopen2(file_->id(), "labels", H5P_DEFAULT)), H5Dclose);
  const H5Handle tb = vlen_base(path, times.get(), "times", H5T_FLOAT);
  vlen_base(path, units.get(), "units", H5T_INTEGER);
  const size_t bytes = H5Tget_size(tb.get());
  if (bytes != 2 && bytes != 4 && bytes != 8) SM_INPUT_ERROR(path << ": /spikes/times holds " << 8 * bytes << "-bit floats");
  time_bits_ = static_cast<int>(8 * bytes);
  n_ = length_of(times.get());
  const int64_t nu = length_of(units.get()), nl = length_of(labels.get());
  if (n_ < 0 || nu != n_ || nl != n_)
    SM_INPUT_ERROR(path << ": /spikes/times, /spikes/units and /labels hold " << n_ << ", " << nu << " and " << nl
                        << " recordings (want one 1-d entry per recording in each)");
}

SpikeTrainFile::~SpikeTrainFile() = default;

void SpikeTrainFile::read(int64_t begin, int64_t end, std::vector<SpikeTrain>& out, std::vector<int64_t>& labels) const {
  const size_t n = static_cast<size_t>(end - begin);
  out.assign(n, SpikeTrain());
  labels.assign(n, 0);
  if (n == 0) return;
  H5Handle times(SM_H5_CHECK(H5Dopen2(file_->id(), "spikes/times", H5P_DEFAULT)), H5Dclose);
  H5Handle units(SM_H5_CHECK(H5Dopen2(file_->id(), "spikes/units", H5P_DEFAULT)), H5Dclose);
  H5Handle lab(SM_H5_CHECK(H5Dopen2(file_->id(), "labels", H5P_DEFAULT)), H5Dclose);
  H5Handle tmem(SM_H5_CHECK(H5Tvlen_create(H5T_NATIVE_DOUBLE)), H5Tclose);
  H5Handle umem(SM_H5_CHECK(H5Tvlen_create(H5T_NATIVE_INT64)), H5Tclose);
  std::vector<hvl_t> tv(n, hvl_t{0, nullptr}), uv(n, hvl_t{0, nullptr});
  const hsize_t count = n;
  H5Handle ts(SM_H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
  struct Reclaim {  // the variable-length buffers HDF5 allocated, freed on every path
    hid_t type, space;
    std::vector<hvl_t>& v;
    ~Reclaim() { H5Dvlen_reclaim(type, space, H5P_DEFAULT, v.data()); }
  } free_t{tmem.get(), ts.get(), tv}, free_u{umem.get(), ts.get(), uv};
  try {
    read_rows(times.get(), tmem.get(), begin, end, tv.data());
    read_rows(units.get(), umem.get(), begin, end, uv.data());
    read_rows(lab.get(), H5T_NATIVE_INT64, begin, end, labels.data());
  } catch (const Error& e) {
    SM_INPUT_ERROR(path_ << ": recordings " << begin << ".." << end - 1 << " cannot be read (truncated or damaged?): " << e.what());
  }
  std::string bad;
  for (size_t i = 0; i < n && bad.empty(); ++i) {
    const int64_t rec = begin + static_cast<int64_t>(i);
    const double* t = static_cast<const double*>(tv[i].p);
    const int64_t* u = static_cast<const int64_t*>(uv[i].p);
    std::ostringstream why;
    if (tv[i].len != uv[i].len) why << tv[i].len << " times but " << uv[i].len << " units";
    for (size_t k = 0; why.tellp() == 0 && k < tv[i].len; ++k) {
      if (!std::isfinite(t[k]) || t[k] < 0) why << "time " << t[k] << " s at spike " << k << " (want finite, >= 0)";
      else if (k > 0 && t[k] < t[k - 1]) why << "spike times out of order at spike " << k << " (" << t[k - 1] << " s, then " << t[k] << " s)";
      else if (u[k] < 0 || u[k] >= channels_) why << "unit " << u[k] << " at spike " << k << " (want 0.." << channels_ - 1 << ")";
    }
    if (why.tellp() == 0 && (labels[i] < 0 || labels[i] >= classes_)) why << "label " << labels[i] << " (want 0.." << classes_ - 1 << ")";
    if (why.tellp() != 0) {
      bad = path_ + ": recording " + std::to_string(rec) + ": " + why.str();
      break;
    }
    out[i].t.assign(t, t + tv[i].len);
    out[i].x.assign(u, u + uv[i].len);
  }
  if (!bad.empty()) SM_INPUT_ERROR(bad);
}

}  // namespace sm
