// import_state.cpp — the import_state record (text, one line of numbers then the skipped
// messages), the resume check of import_state.h and the attributes of a finished import.
#include "spikemesh/data/import_state.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/blocking_guard.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/data/event_datasets.h"
#include "spikemesh/data/frame_integration.h"
#include "spikemesh/io/crc32.h"

namespace sm {

namespace fs = std::filesystem;

namespace {
constexpr int kStateVersion = 2;

void set_i64_array_attr(const H5File& f, const std::string& key, const std::vector<int64_t>& v) {
  if (H5Aexists(f.id(), key.c_str()) > 0) SM_H5_CHECK(H5Adelete(f.id(), key.c_str()));
  hsize_t n = v.size();
  H5Handle space(SM_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  H5Handle a(SM_H5_CHECK(H5Acreate2(f.id(), key.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
             H5Aclose);
  SM_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, v.data()));
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}
}  // namespace

std::string ImportState::to_text() const {
  std::ostringstream os;
  os << "v" << kStateVersion << " " << fingerprint << " " << next_unit << " " << rounds_done;
  for (int k = 0; k < 2; ++k) os << " " << rows[k] << " " << events[k] << " " << crc_x[k] << " " << crc_y[k];
  os << " " << skipped << " " << saturated << " " << empty[0] << " " << empty[1];
  for (int k = 0; k < 2; ++k) {
    os << " " << per_class[k].size();
    for (int64_t c : per_class[k]) os << " " << c;
  }
  os << " " << skipped_files.size() << " " << empty_samples.size();
  for (auto& f : skipped_files) os << "\n" << f;
  for (auto& f : empty_samples) os << "\n" << f;
  return os.str();
}

bool ImportState::parse(const std::string& text, ImportState& s) {
  std::istringstream is(text);
  std::string v;
  if (!(is >> v >> s.fingerprint >> s.next_unit >> s.rounds_done) || v != "v" + std::to_string(kStateVersion))
    return false;
  for (int k = 0; k < 2; ++k)
    if (!(is >> s.rows[k] >> s.events[k] >> s.crc_x[k] >> s.crc_y[k])) return false;
  if (!(is >> s.skipped >> s.saturated >> s.empty[0] >> s.empty[1])) return false;
  for (int k = 0; k < 2; ++k) {
    size_t n;
    if (!(is >> n) || n > 1000) return false;
    s.per_class[k].resize(n);
    for (auto& c : s.per_class[k])
      if (!(is >> c)) return false;
  }
  size_t n, n_empty;
  if (!(is >> n >> n_empty) || n > 100 || n_empty > 100) return false;
  std::string line;
  std::getline(is, line);
  for (size_t i = 0; i < n && std::getline(is, line); ++i) s.skipped_files.push_back(line);
  for (size_t i = 0; i < n_empty && std::getline(is, line); ++i) s.empty_samples.push_back(line);
  return s.skipped_files.size() == n && s.empty_samples.size() == n_empty;
}

bool resume_import(const std::string& tmp, const std::string& fingerprint, const EventFileShape& shape, Comm* group,
                   EventH5Writer& w, ImportState& st) {
  const int rank = group ? group->rank() : 0, nranks = group ? group->size() : 1;
  auto agree = [&](const std::function<void()>& f) { agree_on_error(group, f); };
  auto is_root = [&] { return rank == 0; };
  bool resumed = false;
  int have_tmp = is_root() && fs::exists(tmp);
  if (group) have_tmp = any_rank(*group, have_tmp);
  if (have_tmp) {
    agree([&] {  // every rank must see it before the collective open (not a verdict on the file)
      if (!fs::exists(tmp))
        SM_INPUT_ERROR(tmp << " is not visible here (" << where_am_i() << "): is --out on a file system every rank shares?");
    });
    std::string why;
    try {
      if (group) guarded_collective(*group, "opening " + tmp, [&] { agree([&] { w = EventH5Writer::open(tmp, group, shape); }); });
      else w = EventH5Writer::open(tmp, group, shape);
      ImportState old;
      if (!w.file().has_attr("import_state") || !ImportState::parse(w.file().attr_string("import_state"), old))
        why = "it holds no import progress";
      else if (old.fingerprint != fingerprint)
        why = "it was made with other options or another file listing";
      if (why.empty()) {
        // Read back every row written and compare with the recorded crc32s (each rank a block).
        bool same = true;
        for (Split s : {Split::Train, Split::Test}) {
          const int64_t n = old.rows[split_index(s)], b = n * rank / nranks, e = n * (rank + 1) / nranks;
          // This rank's block of x and y, read back (in bounded pieces) and hashed.
          uint32_t cx = 0, cy = 0;
          agree([&] {
            cx = dataset_rows_crc32(w.file(), std::string("/") + split_name(s) + "/x", b, e);
            cy = dataset_rows_crc32(w.file(), std::string("/") + split_name(s) + "/y", b, e);
          });
          const int64_t x_bytes = (e - b) * w.row_bytes();
          std::vector<int64_t> mine = {cx, x_bytes, cy, (e - b) * 8};
          std::vector<int64_t> all = group ? gather_i64s(*group, mine, 0) : mine;
          if (is_root()) {
            uint32_t cx = 0, cy = 0;
            for (size_t q = 0; q < all.size(); q += 4) {
              cx = crc32_concat(cx, static_cast<uint32_t>(all[q]), all[q + 1]);
              cy = crc32_concat(cy, static_cast<uint32_t>(all[q + 2]), all[q + 3]);
            }
            same = same && cx == old.crc_x[split_index(s)] && cy == old.crc_y[split_index(s)];
          }
        }
        if (group) same = !any_rank(*group, !same);
        if (!same) why = "the rows it holds do not match their recorded crc32 (interrupted mid-write?)";
      }
      if (why.empty()) {
        st = old;
        resumed = true;
      } else {
        w.close();
      }
    } catch (const Error& e) {
      // Not an HDF5 file, or its rows unreadable (Input, Library): a verdict on the file. An
      // Internal error (out of memory, a bug) is not: it stops the import and keeps the .tmp.
      w = EventH5Writer();
      if (e.kind() == ErrorKind::Internal) throw;
      why = std::string("it cannot be read: ") + e.what();
    }
    if (!resumed) {
      if (is_root()) {
        SM_WARN(tmp << " is left from an interrupted import, but " << why << "; removing it and starting over");
        std::remove(tmp.c_str());
      }
      if (group) group->barrier();
    } else if (is_root()) {
      SM_INFO("resuming the interrupted import in " << tmp << ": " << st.rows[0] + st.rows[1] << " samples of the first "
                                                    << st.next_unit << " files done");
    }
  }
  return resumed;
}

// The root attributes of a finished import (docs/architecture.md §8c; output/README.md) and
// the crc32 attribute of every split's x and y. Collective over the file's group: the same
// values on every rank.
void write_dataset_attributes(const H5File& f, const EventDatasetLayout& L, const std::string& source,
                              const FrameSpec& spec, int frame_h, int frame_w, StoredType stored, int deflate,
                              bool events, const ImportState& st) {
  f.set_attr("num_classes", static_cast<int64_t>(L.class_names.size()));
  f.set_attr("T", static_cast<int64_t>(spec.T));
  f.set_attr("layout", "NTCHW");
  f.set_attr("encoding", "events");
  f.set_attr("source", source);
  f.set_attr("x_scale", 1.0);
  f.set_attr("format_version", static_cast<int64_t>(1));
  f.set_attr("dataset", L.dataset);
  f.set_attr("split_by", split_by_name(spec.split_by));
  f.set_attr("duration_us", spec.duration_us);
  // size: the side of square frames (--size, or a square sensor); 0 for N-Caltech101's 180 x 240
  f.set_attr("size", static_cast<int64_t>(frame_h == frame_w ? frame_h : 0));
  f.set_attr("frame_h", static_cast<int64_t>(frame_h));
  f.set_attr("frame_w", static_cast<int64_t>(frame_w));
  const bool resized = frame_h != L.sensor_h || frame_w != L.sensor_w;
  f.set_attr("resize", resized ? "bilinear antialias (torchvision Resize)" : "none");
  f.set_attr("sensor_h", static_cast<int64_t>(L.sensor_h));
  f.set_attr("sensor_w", static_cast<int64_t>(L.sensor_w));
  if (L.train_ratio > 0) f.set_attr("train_ratio", L.train_ratio);  // the per-class split's
  std::string names;
  for (size_t i = 0; i < L.class_names.size(); ++i) names += (i ? "," : "") + L.class_names[i];
  f.set_attr("class_names", names);
  set_i64_array_attr(f, "train_per_class", st.per_class[0]);
  set_i64_array_attr(f, "test_per_class", st.per_class[1]);
  f.set_attr("stored_dtype", stored_type_name(stored));
  f.set_attr("deflate", static_cast<int64_t>(deflate));
  f.set_attr("saturated_values", st.saturated);
  f.set_attr("skipped_samples", st.skipped);
  std::string skipped;
  for (auto& s : st.skipped_files) skipped += s + "\n";
  f.set_attr("skipped", skipped);
  // Recordings without an event: zero frames, as SpikingJelly integrates them — never silently.
  f.set_attr("train_empty_samples", st.empty[0]);
  f.set_attr("test_empty_samples", st.empty[1]);
  std::string empty;
  for (auto& s : st.empty_samples) empty += s + "\n";
  f.set_attr("empty_samples", empty);
  f.set_attr("events_kept", static_cast<int64_t>(events));
  f.set_attr("checksum", "crc32 train/x " + hex32(st.crc_x[0]) + " train/y " + hex32(st.crc_y[0]) + " test/x " +
                             hex32(st.crc_x[1]) + " test/y " + hex32(st.crc_y[1]));
  for (Split s : {Split::Train, Split::Test}) {
    const std::string g = std::string("/") + split_name(s);
    f.set_attr_on(g + "/x", "crc32", static_cast<int64_t>(st.crc_x[split_index(s)]));
    f.set_attr_on(g + "/y", "crc32", static_cast<int64_t>(st.crc_y[split_index(s)]));
  }
}

}  // namespace sm
