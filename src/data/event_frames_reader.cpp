// event_frames_reader.cpp — `--frames` parsed, a dataset file's stored events validated and
// read by runs of samples, integrated (frame_integration.h) and passed through the file's
// stored type (event_h5_writer.h frames_to_stored) as the importer writes /x.
#include "spikemesh/data/event_frames_reader.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "spikemesh/core/error.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/data/event_h5_writer.h"
#include "spikemesh/data/import_state.h"
#include "spikemesh/io/h5file.h"

namespace sm {

FramesOption parse_frames_option(const std::string& text, const std::string& flag) {
  FramesOption o;
  o.text = text;
  if (text.empty() || text == "off") return o;
  const std::string what = flag + " " + text;
  const size_t comma = text.find(',');
  if (comma == std::string::npos)
    SM_INPUT_ERROR(what << ": expected T,number | T,time | T,duration:US (e.g. 16,number or 8,duration:50000), or off");
  o.spec.T = static_cast<int>(parse_flag_int("T", text.substr(0, comma), what + ": the frame count T"));
  const std::string split = text.substr(comma + 1);
  const std::string duration = "duration:";
  if (split == "number" || split == "time") {
    o.spec.split_by = split == "number" ? SplitBy::Number : SplitBy::Time;
  } else if (split.compare(0, duration.size(), duration) == 0) {
    o.spec.split_by = SplitBy::Duration;
    o.spec.duration_us = parse_flag_int("duration-us", split.substr(duration.size()), what + ": the frame duration (us)");
  } else {
    SM_INPUT_ERROR(what << ": the split '" << split << "' is not number, time or duration:US (e.g. " << o.spec.T
                        << ",duration:50000)");
  }
  o.on = true;
  return o;
}

namespace {
std::string split_group(Split s) { return std::string("/") + split_name(s); }

int64_t positive_attr(const H5File& f, const std::string& path, const char* key, const std::string& text) {
  if (!f.has_attr(key))
    SM_INPUT_ERROR(path << ": no attribute '" << key << "' (a file of `spikemesh data cifar10-dvs | dvs128-gesture | "
                        << "n-mnist` has it); --frames " << text << " needs it");
  const int64_t v = f.attr_int(key);
  if (v < 1 || v > (1 << 16)) SM_INPUT_ERROR(path << ": attribute " << key << " = " << v << " (expected 1..65536)");
  return v;
}

// One H5Dread of elements [first, first + count) of the 1-d dataset `ds` into `out`.
void read_range(hid_t ds, hid_t mem_type, int64_t first, int64_t count, void* out) {
  if (count == 0) return;
  H5Handle fs(SM_H5_CHECK(H5Dget_space(ds)), H5Sclose);
  const hsize_t start = static_cast<hsize_t>(first), n = static_cast<hsize_t>(count);
  SM_H5_CHECK(H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, &start, nullptr, &n, nullptr));
  H5Handle ms(SM_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  SM_H5_CHECK(H5Dread(ds, mem_type, ms.get(), fs.get(), H5P_DEFAULT, out));
}

// `n` frame values as the importer stores them in `stored` and H5Dataset::read delivers them
// (times x_scale): u8/u16 rounded and saturated, f16 rounded, f32 as they are.
void through_stored_type(const float* v, int64_t n, StoredType t, float scale, std::vector<uint8_t>& bytes,
                         float* dst) {
  if (t == StoredType::F32) {
    for (int64_t i = 0; i < n; ++i) dst[i] = v[i] * scale;
    return;
  }
  frames_to_stored(v, n, t, bytes);
  if (t == StoredType::U8) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bytes[static_cast<size_t>(i)] * scale;
  } else if (t == StoredType::U16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t u;
      std::memcpy(&u, bytes.data() + 2 * i, 2);
      dst[i] = static_cast<float>(u) * scale;
    }
  } else {  // f16: HDF5 converts to f32 exactly while reading, as the tensor conversion does
    Tensor h = Tensor::empty({n}, DType::F16);
    std::memcpy(h.raw(), bytes.data(), bytes.size());
    const Tensor f = h.to_dtype(DType::F32);
    for (int64_t i = 0; i < n; ++i) dst[i] = f.data<float>()[i] * scale;
  }
}
}  // namespace

EventFramesReader::EventFramesReader(const H5File& f, const DatasetInfo& info, const FramesOption& opt)
    : path_(info.path), text_(opt.text), spec_(opt.spec), stored_(stored_type_from_name(info.stored_name)),
      x_scale_(static_cast<float>(info.x_scale)) {
  SM_CHECK(opt.on, "EventFramesReader without --frames");
  if (!info.is_events())
    SM_INPUT_ERROR(path_ << ": holds static images (layout " << info.layout << "); --frames " << text_
                         << " makes frames from stored events (an event dataset imported with --events)");
  for (Split s : {Split::Train, Split::Test})
    for (const char* a : {"t", "x", "y", "p", "offsets"})
      if (!f.has_dataset(split_group(s) + "/events/" + a))
        SM_INPUT_ERROR(path_ << ": holds no raw events (no " << split_group(s) << "/events/" << a << "); --frames "
                             << text_ << " makes frames from them: re-import it with --events (e.g. spikemesh data "
                             << "cifar10-dvs --from DIR --out FILE --events)");
  spec_.height = static_cast<int>(positive_attr(f, path_, "sensor_h", text_));
  spec_.width = static_cast<int>(positive_attr(f, path_, "sensor_w", text_));
  // frame_h x frame_w; files written before non-square frames have only `size` (S x S)
  const bool hw = f.has_attr("frame_h") && f.has_attr("frame_w");
  out_h_ = static_cast<int>(positive_attr(f, path_, hw ? "frame_h" : "size", text_));
  out_w_ = static_cast<int>(positive_attr(f, path_, hw ? "frame_w" : "size", text_));
  const Shape per_step(info.sample_shape.begin() + 1, info.sample_shape.end());
  if (per_step != Shape{2, out_h_, out_w_})
    SM_INPUT_ERROR(path_ << ": /train/x holds " << shape_str(per_step) << " frames but the attributes say "
                         << out_h_ << " x " << out_w_ << " ([2, " << out_h_ << ", " << out_w_ << "] expected)");
  // The published binary formats of CIFAR10-DVS and N-MNIST decode uint32 timestamps, whose
  // arithmetic SpikingJelly's split_by='time' wraps (event_formats.h); Gesture's are int64.
  t_u32_ = !f.has_attr("dataset") || f.attr_string("dataset") != "dvs128-gesture";
  for (Split s : {Split::Train, Split::Test}) {
    const std::string g = split_group(s) + "/events/";
    Tensor off = f.read(g + "offsets", DType::I64);
    const int64_t rows = s == Split::Train ? info.train_size : info.test_size, events = f.dataset_shape(g + "t")[0];
    if (off.numel() != rows + 1)
      SM_INPUT_ERROR(path_ << ": " << g << "offsets has " << off.numel() << " entries (expected " << rows + 1 << ")");
    const int64_t* o = off.data<int64_t>();
    if (off.numel() != rows + 1 || o[0] != 0 || o[rows] != events)
      SM_INPUT_ERROR(path_ << ": " << g << "offsets has " << off.numel() << " entries from " << o[0] << " to "
                           << o[off.numel() - 1] << " (expected " << rows + 1 << " from 0 to " << events << ")");
    for (const char* a : {"x", "y", "p"})
      if (f.dataset_shape(g + a)[0] != events)
        SM_INPUT_ERROR(path_ << ": " << g << a << " has " << f.dataset_shape(g + a)[0] << " events, " << g << "t "
                             << events);
    for (int64_t i = 0; i < rows; ++i)
      if (o[i + 1] < o[i]) SM_INPUT_ERROR(path_ << ": " << g << "offsets decrease at sample " << i);
    offsets_[split_index(s)] = std::make_shared<const std::vector<int64_t>>(o, o + rows + 1);
  }
}

Shape EventFramesReader::sample_shape() const { return {spec_.T, 2, out_h_, out_w_}; }

SampleEvents EventFramesReader::read_events(const H5File& f, Split s, const std::vector<int64_t>& sorted) const {
  const std::vector<int64_t>& off = *offsets_[split_index(s)];
  SampleEvents r;
  r.events.t_u32 = t_u32_;
  r.begin.push_back(0);
  for (int64_t i : sorted) {
    SM_CHECK(i >= 0 && i + 1 < static_cast<int64_t>(off.size()), "sample " << i << " of " << off.size() - 1);
    r.begin.push_back(r.begin.back() + off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]);
  }
  EventStream& ev = r.events;
  const size_t total = static_cast<size_t>(r.begin.back());
  ev.t.resize(total);
  ev.x.resize(total);
  ev.y.resize(total);
  ev.p.resize(total);
  const std::string g = split_group(s) + "/events/";
  auto open = [&](const char* a) { return H5Handle(SM_H5_CHECK(H5Dopen2(f.id(), (g + a).c_str(), H5P_DEFAULT)), H5Dclose); };
  H5Handle dt = open("t"), dx = open("x"), dy = open("y"), dp = open("p");
  // One read per array and run of consecutive samples (their events are contiguous).
  for (size_t a = 0; a < sorted.size();) {
    size_t b = a + 1;
    while (b < sorted.size() && sorted[b] == sorted[b - 1] + 1) ++b;
    const int64_t first = off[static_cast<size_t>(sorted[a])], count = off[static_cast<size_t>(sorted[b - 1]) + 1] - first;
    const size_t at = static_cast<size_t>(r.begin[a]);
    read_range(dt.get(), H5T_NATIVE_INT64, first, count, ev.t.data() + at);
    read_range(dx.get(), H5T_NATIVE_UINT16, first, count, ev.x.data() + at);
    read_range(dy.get(), H5T_NATIVE_UINT16, first, count, ev.y.data() + at);
    read_range(dp.get(), H5T_NATIVE_UINT8, first, count, ev.p.data() + at);
    a = b;
  }
  check_events_on_sensor(ev, spec_.height, spec_.width, path_ + " " + g);
  for (size_t k = 0; k < total; ++k)
    if (ev.p[k] > 1) SM_INPUT_ERROR(path_ << " " << g << "p: polarity " << +ev.p[k] << " (expected 0 or 1)");
  return r;
}

void EventFramesReader::frames(const SampleEvents& ev, Split s, const std::vector<int64_t>& sorted,
                               const std::vector<int64_t>& indices, Tensor& x) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t row = static_cast<int64_t>(spec_.T) * 2 * out_h_ * out_w_;
  x = Tensor::empty({n, spec_.T, 2, out_h_, out_w_}, DType::F32);
  std::vector<std::exception_ptr> failed(static_cast<size_t>(n));
#pragma omp parallel
  {
    FrameScratch scratch;
    std::vector<uint8_t> bytes;
#pragma omp for schedule(dynamic)
    for (int64_t k = 0; k < n; ++k) {
      try {
        const int64_t i = indices[static_cast<size_t>(k)];
        const size_t pos = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), i) - sorted.begin());
        const std::string what = path_ + " /" + split_name(s) + " sample " + std::to_string(i) + " (--frames " + text_ + ")";
        const float* frames =
            integrate_and_resize(ev.events, ev.begin[pos], ev.begin[pos + 1], spec_, out_h_, out_w_, scratch, what);
        through_stored_type(frames, row, stored_, x_scale_, bytes, x.data<float>() + k * row);
      } catch (...) {  // exceptions may not leave an OpenMP region: the first is rethrown below
        failed[static_cast<size_t>(k)] = std::current_exception();
      }
    }
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

}  // namespace sm
