// import_spike_trains.cpp — `spikemesh data shd | ssc` (data/import_spike_trains.h).
#include "spikemesh/data/import_spike_trains.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/spike_trains.h"

namespace sm {

namespace {

constexpr int kChannels = 700;
constexpr int64_t kBlockBytes = int64_t(64) << 20;  // frames binned and written at a time (at most 512 recordings)

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// <from>/<prefix>_<split>.h5, named in the error when missing (a gzipped copy: say so).
std::string split_file(const std::string& from, const std::string& prefix, const std::string& split) {
  const std::string p = from + "/" + prefix + "_" + split + ".h5";
  if (exists(p)) return p;
  if (exists(p + ".gz")) SM_INPUT_ERROR(p << ".gz is compressed: gunzip it first (the published files are gzipped)");
  SM_INPUT_ERROR("--from " << from << ": no " << prefix << "_" << split << ".h5 (the published " << prefix
                           << "_{train,test" << (prefix == "ssc" ? ",valid" : "") << "}.h5 files, gunzipped)");
}

struct SplitSource {
  std::string name;  // train | valid | test
  std::unique_ptr<SpikeTrainFile> file;
};

// Frames of recordings [begin, end) of `f` into x ([n, T, 1, 1, 700], stored type) and y.
void bin_block(const SpikeTrainFile& f, int64_t begin, int64_t end, const SpikeBinning& b, DType stored, Tensor& x,
               Tensor& y, SpikeImportResult& r) {
  std::vector<SpikeTrain> rec;
  std::vector<int64_t> labels;
  f.read(begin, end, rec, labels);
  const int64_t n = end - begin, row = static_cast<int64_t>(b.T) * kChannels;
  x = Tensor::empty({n, b.T, 1, 1, kChannels}, stored);
  y = Tensor::empty({n}, DType::I64);
  std::vector<float> frame(static_cast<size_t>(row));
  for (int64_t i = 0; i < n; ++i) {
    const SpikeTrain& s = rec[static_cast<size_t>(i)];
    std::fill(frame.begin(), frame.end(), 0.0f);
    r.longest_bins = std::max(r.longest_bins, bin_spike_train(s, b, frame.data()));
    r.spikes += static_cast<int64_t>(s.t.size());
    if (stored == DType::U8) {
      uint8_t* d = x.data<uint8_t>() + i * row;
      for (int64_t k = 0; k < row; ++k) {
        const float v = frame[static_cast<size_t>(k)];
        r.saturated += v > 255.0f;
        d[k] = static_cast<uint8_t>(std::min(v, 255.0f));
      }
    } else {
      std::memcpy(x.data<float>() + i * row, frame.data(), sizeof(float) * static_cast<size_t>(row));
    }
    y.data<int64_t>()[i] = labels[static_cast<size_t>(i)];
  }
}

void check_options(const SpikeImportOptions& o) {
  if (o.dataset != "shd" && o.dataset != "ssc") SM_INPUT_ERROR("unknown spike dataset '" << o.dataset << "'");
  if (o.T < 1) SM_INPUT_ERROR("--T must be >= 1, got " << o.T);
  if (o.split_by != "number" && o.split_by != "time") SM_INPUT_ERROR("--split-by must be number or time");
  if (!(o.dt_ms >= 0) || !std::isfinite(o.dt_ms)) SM_INPUT_ERROR("--dt-ms must be a number of milliseconds >= 0");
  if (o.dtype != "u8" && o.dtype != "f32") SM_INPUT_ERROR("--dtype must be u8 or f32, got '" << o.dtype << "'");
  if (exists(o.out) && !o.overwrite) SM_INPUT_ERROR("--out " << o.out << " exists (--overwrite replaces it)");
}

}  // namespace

SpikeImportResult import_spike_dataset(const SpikeImportOptions& o) {
  check_options(o);
  Timer timer;
  const bool ssc = o.dataset == "ssc";
  const int classes = ssc ? 35 : 20;
  std::vector<SplitSource> splits;
  for (const char* s : {"train", "valid", "test"}) {
    if (!ssc && std::strcmp(s, "valid") == 0) continue;
    splits.push_back({s, std::make_unique<SpikeTrainFile>(split_file(o.from, o.dataset, s), kChannels, classes)});
  }
  SpikeBinning b;
  b.T = o.T;
  b.split_by = o.split_by;
  b.dt_ms = o.dt_ms;
  b.channels = kChannels;
  DatasetInfo info;
  info.num_classes = classes;
  info.T = o.T;
  info.layout = "NTCHW";
  info.encoding = "events";
  info.source = std::string(ssc ? "SSC" : "SHD") + " (" + o.from + ")";
  info.sample_shape = {o.T, 1, 1, kChannels};
  info.stored = o.dtype == "u8" ? DType::U8 : DType::F32;
  info.train_size = splits.front().file->size();
  info.test_size = splits.back().file->size();
  H5DatasetWriter w(o.out, info);  // <out>.tmp until commit(); removed on any error
  w.set_deflate(o.deflate >= 0 ? o.deflate : info.stored == DType::U8 ? 1 : 0);
  SpikeImportResult r;
  for (const SplitSource& sp : splits) {
    b.time_bits = sp.file->time_bits();
    const int64_t n = sp.file->size();
    const int64_t block = std::clamp<int64_t>(
        kBlockBytes / (static_cast<int64_t>(o.T) * kChannels * static_cast<int64_t>(dtype_size(info.stored))), 1, 512);
    for (int64_t begin = 0; begin < n; begin += block) {
      const int64_t end = std::min(n, begin + block);
      Tensor x, y;
      bin_block(*sp.file, begin, end, b, info.stored, x, y, r);
      if (sp.name == "train") w.write(Split::Train, begin, x, y);
      else if (sp.name == "test") w.write(Split::Test, begin, x, y);
      else w.write_group("valid", n, begin, x, y);
    }
    (sp.name == "train" ? r.train : sp.name == "test" ? r.test : r.valid) = n;
  }
  if (o.dt_ms > 0 && r.longest_bins < o.T) {
    std::ostringstream os;
    os << "--dt-ms " << o.dt_ms << " with --T " << o.T << " spans " << o.dt_ms * o.T / 1000.0
       << " s, but the longest recording fills " << r.longest_bins << " bin(s): bins " << r.longest_bins << ".." << o.T - 1
       << " would be empty in every sample (use --T " << std::max<int64_t>(1, r.longest_bins) << ", or a shorter --dt-ms)";
    SM_INPUT_ERROR(os.str());
  }
  H5File& f = w.file();
  f.set_attr("split_by", o.dt_ms > 0 ? std::string("duration") : o.split_by);
  f.set_attr("dt_ms", o.dt_ms);
  f.set_attr("channels", static_cast<int64_t>(kChannels));
  f.set_attr("saturated", r.saturated);
  w.commit();
  r.seconds = timer.ms() / 1000.0;
  std::ostringstream os;
  os << "wrote " << o.out << ": " << r.train << " train" << (ssc ? " + " + std::to_string(r.valid) + " valid" : "")
     << " + " << r.test << " test recordings as [" << o.T << ", 1, 1, 700] counts ("
     << (o.dt_ms > 0 ? "bins of " : "split by ");
  if (o.dt_ms > 0) os << o.dt_ms << " ms";
  else os << o.split_by;
  os << "), " << r.spikes
     << " spikes, " << r.saturated << " count(s) saturated at 255, in " << r.seconds << " s";
  SM_INFO(os.str());
  return r;
}

}  // namespace sm
