// import_events.cpp — the parallel, resumable import of import_events.h: options and listing
// agreed over the ranks, the resume (import_state.h), rounds of decode + integrate + convert per
// rank (decode_units), every sample's outcome gathered and rows assigned in sample order, the
// room checked, the collective writes (event_h5_writer.h), progress lines, the signal stop, the
// final attributes (write_dataset_attributes) and the rename.
#include "spikemesh/data/import_events.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/blocking_guard.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/stop_signal.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/data/event_datasets.h"
#include "spikemesh/data/event_h5_writer.h"
#include "spikemesh/data/frame_integration.h"
#include "spikemesh/data/import_state.h"
#include "spikemesh/io/crc32.h"

namespace sm {

namespace fs = std::filesystem;

namespace {
using Clock = std::chrono::steady_clock;

// One sample decoded by this rank in this round.
struct SampleOut {
  int64_t index = 0;  // into layout.samples
  bool ok = false;
  std::string error;
  std::vector<uint8_t> x;  // stored bytes
  uint32_t crc_x = 0, crc_y = 0;
  int64_t saturated = 0;
  int32_t n_frames = 0;
  EventStream events;  // kept with --events
};

// A sample's outcome as every rank learns it (the exchange after each round).
struct Outcome {
  int64_t index = -1;
  bool ok = false;
  uint32_t cx = 0, cy = 0;
  int64_t nev = 0, sat = 0;
  std::string error;
};

// `s` on one line of printable text, at most 500 characters (messages cross ranks line by line
// and end up in the skipped attribute).
std::string one_line(const std::string& s) {
  std::string o;
  for (char c : s.substr(0, 500)) o.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c);
  return o;
}

// Events of `ev` with t in [b, e) (SpikingJelly's boolean mask: file order kept).
EventStream cut(const EventStream& ev, int64_t b, int64_t e) {
  EventStream o;
  o.t_u32 = ev.t_u32;
  for (int64_t i = 0; i < ev.size(); ++i)
    if (ev.t[i] >= b && ev.t[i] < e) o.push(ev.t[i], ev.x[i], ev.y[i], ev.p[i]);
  return o;
}

// Decodes, integrates, resizes and converts the samples of this rank's units [my0, my1) of
// the round (local, no communication). A file's or a sample's Input error is recorded in its
// samples with --skip-bad and thrown otherwise. `after_file(u)` runs after each unit.
std::vector<SampleOut> decode_units(const EventDatasetLayout& L, const std::vector<std::vector<int64_t>>& units,
                                    int64_t my0, int64_t my1, const FrameSpec& spec, int S, StoredType stored,
                                    const EventImportOptions& o, const std::function<void(int64_t)>& after_file) {
  const bool resize = S != spec.width || S != spec.height;
  const int64_t out_elems = static_cast<int64_t>(spec.T) * 2 * S * S;
  std::vector<float> frames(static_cast<size_t>(spec.T) * 2 * spec.height * spec.width);
  std::vector<float> resized(resize ? static_cast<size_t>(out_elems) : 0);
  std::vector<SampleOut> outs;
  for (int64_t u = my0; u < my1; ++u) {
    const int32_t f = L.samples[units[u][0]].file;
    const std::string path = (fs::path(L.root) / L.files[f]).string();
    EventStream ev;
    std::string file_error;
    try {
      EventFileFormat fmt = L.formats[f];
      if (fmt == EventFileFormat::Aedat2Cifar10Dvs) fmt = sniff_aedat_version(path);
      ev = read_event_file(path, fmt);
      check_events_on_sensor(ev, spec.height, spec.width, path);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Input) throw;
      if (!o.skip_bad) SM_INPUT_ERROR(e.what() << " (--skip-bad leaves such files out and counts them)");
      file_error = e.what();
    }
    for (int64_t si : units[u]) {
      const EventSampleRef& ref = L.samples[si];
      SampleOut so;
      so.index = si;
      so.error = file_error;
      if (file_error.empty()) {
        try {
          const bool whole = ref.t_begin == std::numeric_limits<int64_t>::min();
          EventStream sub = whole ? EventStream() : cut(ev, ref.t_begin, ref.t_end);
          const EventStream& src = whole ? ev : sub;
          const std::string what = path + (whole ? "" : " (sample " + ref.name + ")");
          const int64_t n_frames = integrate_frames(src, 0, src.size(), spec, frames.data(), what);
          if (n_frames > std::numeric_limits<int32_t>::max())
            SM_INPUT_ERROR(what << ": " << n_frames << " fixed-duration frames (a larger --duration-us?)");
          so.n_frames = static_cast<int32_t>(n_frames);
          if (resize) resize_bilinear_aa(frames.data(), 2LL * spec.T, spec.height, spec.width, S, resized.data());
          so.saturated = frames_to_stored(resize ? resized.data() : frames.data(), out_elems, stored, so.x);
          const int64_t label = ref.label;
          so.crc_x = crc32_bytes(so.x.data(), so.x.size());
          so.crc_y = crc32_bytes(&label, 8);
          if (o.events) so.events = whole ? std::move(ev) : std::move(sub);
          so.ok = true;
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Input) throw;
          if (!o.skip_bad) SM_INPUT_ERROR(e.what() << " (--skip-bad leaves such samples out and counts them)");
          so.error = e.what();
          so.x.clear();
        }
      }
      outs.push_back(std::move(so));
    }
    after_file(u);
  }
  return outs;
}

std::string fmt_seconds(double s) {
  char b[32];
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  else std::snprintf(b, sizeof b, "%.0fs", s);
  return b;
}

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

const char* dataset_title(const std::string& d) {
  return d == "cifar10-dvs" ? "CIFAR10-DVS" : d == "dvs128-gesture" ? "DVS128 Gesture" : "N-MNIST";
}

// The root attributes of a finished import (docs/architecture.md §8c; output/README.md) and
// the crc32 attribute of every split's x and y. Collective over the file's group: the same
// values on every rank.
void write_dataset_attributes(const H5File& f, const EventDatasetLayout& L, const std::string& source,
                              const FrameSpec& spec, int S, StoredType stored, int deflate, bool events,
                              const ImportState& st) {
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
  f.set_attr("size", static_cast<int64_t>(S));
  f.set_attr("resize", S != L.sensor_w || S != L.sensor_h ? "bilinear antialias (torchvision Resize)" : "none");
  f.set_attr("sensor_h", static_cast<int64_t>(L.sensor_h));
  f.set_attr("sensor_w", static_cast<int64_t>(L.sensor_w));
  if (L.dataset == "cifar10-dvs") f.set_attr("train_ratio", L.train_ratio);
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
  f.set_attr("events_kept", static_cast<int64_t>(events));
  f.set_attr("checksum", "crc32 train/x " + hex32(st.crc_x[0]) + " train/y " + hex32(st.crc_y[0]) + " test/x " +
                             hex32(st.crc_x[1]) + " test/y " + hex32(st.crc_y[1]));
  for (Split s : {Split::Train, Split::Test}) {
    const std::string g = std::string("/") + split_name(s);
    f.set_attr_on(g + "/x", "crc32", static_cast<int64_t>(st.crc_x[split_index(s)]));
    f.set_attr_on(g + "/y", "crc32", static_cast<int64_t>(st.crc_y[split_index(s)]));
  }
}

}  // namespace

EventImportResult import_event_dataset(const EventImportOptions& o, Comm* group) {
  const auto t_start = Clock::now();
  install_stop_signal_handlers();
  const int rank = group ? group->rank() : 0, nranks = group ? group->size() : 1;
  auto agree = [&](const std::function<void()>& f) { agree_on_error(group, f); };
  auto is_root = [&] { return rank == 0; };
  // A collective HDF5 step: an arrival check and the --comm-timeout deadline around it (a rank
  // that fails before the library call cannot leave the others waiting inside MPI-IO), and
  // every rank throws the lowest failing rank's error.
  auto collective = [&](const std::string& what, const std::function<void()>& f) {
    if (group) guarded_collective(*group, what, [&] { agree_on_error(group, f); });
    else f();
  };

  // ---- options -------------------------------------------------------------------------
  FrameSpec spec;
  StoredType stored = StoredType::U8;
  EventDatasetLayout L;
  agree([&] {
    if (o.T < 1) SM_INPUT_ERROR("--T " << o.T << ": must be >= 1");
    if (o.duration_us < 0) SM_INPUT_ERROR("--duration-us " << o.duration_us << ": must be > 0");
    if (o.size < 0) SM_INPUT_ERROR("--size " << o.size << ": must be > 0");
    if (o.deflate < -1 || o.deflate > 9) SM_INPUT_ERROR("--deflate " << o.deflate << ": must be 0..9 (or -1: auto)");
    if (o.out.empty()) SM_INPUT_ERROR("--out: give the output file");
    spec.T = o.T;
    spec.split_by = o.duration_us > 0 ? SplitBy::Duration : split_by_from_name(o.split_by);
    spec.duration_us = o.duration_us;
    stored = stored_type_from_name(o.dtype.empty() ? (o.size > 0 ? "f32" : "u8") : o.dtype);
    if (fs::exists(o.out) && !o.overwrite)
      SM_INPUT_ERROR("--out " << o.out << ": the file exists (give --overwrite to replace it once the new one is complete)");
    const fs::path dir = fs::absolute(o.out).parent_path();
    if (!fs::is_directory(dir)) SM_INPUT_ERROR("--out " << o.out << ": the folder " << dir.string() << " does not exist");
    L = list_event_dataset(o.dataset, o.from, o.train_ratio, spec.split_by == SplitBy::Duration);
  });
  spec.height = L.sensor_h;
  spec.width = L.sensor_w;
  // Auto: deflate integer frames (event counts, mostly zeros: 4x smaller at 128x128) but not
  // float ones (resized frames: 20% smaller for 14x slower reads; docs/datasets.md).
  const int deflate = o.deflate >= 0 ? o.deflate : (stored == StoredType::U8 || stored == StoredType::U16) ? 1 : 0;
  const int S = o.size > 0 ? o.size : L.sensor_w;
  if (group) check_same_text(*group, L.describe(), "the listing of --from " + o.from + " (is it on a shared file system?)");

  std::ostringstream canon;
  // Not the rank count nor --files-per-round: the rows do not depend on them, so a resume (a
  // requeued job on another node count) may change them.
  canon << "semantics 1|" << L.describe() << "|T " << spec.T << " " << split_by_name(spec.split_by) << " " << spec.duration_us << " S " << S
        << " " << stored_type_name(stored) << " ev " << o.events << " skip " << o.skip_bad << " deflate " << deflate;
  const std::string fingerprint = [&] {
    char b[20];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(text_hash(canon.str())));
    return std::string(b);
  }();

  // Every rank writes the same attribute values: rank 0's absolute path (working directories may differ).
  const std::string source0 =
      std::string(dataset_title(L.dataset)) + " (" + fs::absolute(L.root).lexically_normal().string() + ")";
  const std::string source = group ? broadcast_string(*group, source0, 0) : source0;

  // ---- work units and rounds -----------------------------------------------------------
  // A unit is one file and the samples it gives; units are in sample order when one file is
  // one sample (rounds of files_per_round per rank), else (Gesture) one round holds them all.
  std::vector<std::vector<int64_t>> units;
  if (!L.multi_sample_files()) {
    for (int64_t i = 0; i < static_cast<int64_t>(L.samples.size()); ++i) units.push_back({i});
  } else {
    units.resize(L.files.size());
    for (int64_t i = 0; i < static_cast<int64_t>(L.samples.size()); ++i) units[L.samples[i].file].push_back(i);
  }
  const int64_t nunits = static_cast<int64_t>(units.size());
  const int64_t per_round = L.multi_sample_files() ? nunits : std::max<int64_t>(1, o.files_per_round) * nranks;

  EventFileShape shape;
  shape.T = spec.T;
  shape.size = S;
  shape.stored = stored;
  shape.train_rows = L.train_size;
  shape.test_rows = L.test_size;
  shape.events = o.events;
  shape.n_frames = spec.split_by == SplitBy::Duration;
  shape.deflate = deflate;
  const std::string tmp = o.out + ".tmp";

  // ---- resume or start -----------------------------------------------------------------
  // --out's folder must be the same on every rank (one file written together): rank 0 leaves a
  // token there that every rank must read back (node-local storage in a multi-node job fails).
  if (group && nranks > 1) {
    const std::string probe = tmp + ".probe";
    const std::string token = fingerprint + "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string expect = broadcast_string(*group, token, 0);
    agree([&] {
      if (!is_root()) return;
      std::ofstream(probe) << expect;
      if (!std::ifstream(probe)) SM_INPUT_ERROR("--out " << o.out << ": cannot write in its folder");
    });
    bool seen = false;
    agree([&] {
      std::string got;
      std::ifstream in(probe);
      std::getline(in, got);
      seen = got == expect;
    });
    const bool all_seen = !any_rank(*group, !seen);
    if (is_root()) std::remove(probe.c_str());
    if (!all_seen)
      agree([&] {
        if (!seen)
          SM_INPUT_ERROR("--out " << o.out << ": its folder is not the one rank 0 writes in (" << where_am_i()
                                  << "): every rank writes one file together, so --out must be on a file system "
                                  << "every rank shares (not node-local storage)");
      });
  }

  ImportState st;
  st.fingerprint = fingerprint;
  for (int k = 0; k < 2; ++k) st.per_class[k].assign(L.class_names.size(), 0);
  EventH5Writer w;
  const bool resumed = resume_import(tmp, fingerprint, shape, group, w, st);
  if (!resumed) collective("creating " + tmp, [&] { w = EventH5Writer::create(tmp, group, shape); });

  if (is_root())
    SM_INFO("importing " << dataset_title(L.dataset) << " from " << L.root << ": " << L.files.size() << " files, "
                         << L.train_size << " train + " << L.test_size << " test samples -> " << o.out << " [T " << spec.T
                         << ", 2, " << S << ", " << S << "] " << stored_type_name(stored) << ", split by "
                         << split_by_name(spec.split_by) << ", " << nranks << " rank(s)");

  try {
    // ---- rounds --------------------------------------------------------------------------
    auto last_print = Clock::now();
    const auto run_start = Clock::now();
    int64_t files_this_run = 0;
    for (int64_t u0 = st.next_unit; u0 < nunits; u0 += per_round) {
      const int64_t r = st.rounds_done, u1 = std::min(nunits, u0 + per_round), nu = u1 - u0;
      const int64_t my0 = u0 + nu * rank / nranks, my1 = u0 + nu * (rank + 1) / nranks;
      std::vector<SampleOut> outs;
      agree([&] {
        outs = decode_units(L, units, my0, my1, spec, S, stored, o, [&](int64_t u) {
          ++files_this_run;
          if (is_root() && o.progress && L.multi_sample_files() &&
              std::chrono::duration<double>(Clock::now() - last_print).count() >= 5.0) {
            last_print = Clock::now();
            SM_INFO("  rank 0: " << u - my0 + 1 << "/" << my1 - my0 << " recordings decoded");
          }
        });
      });
      // Every rank learns every sample's outcome, one line each: "index ok crc_x crc_y events
      // saturated error" (the error made one line: a file name or message cannot forge a line).
      std::ostringstream mine;
      for (const SampleOut& so : outs)
        mine << so.index << " " << so.ok << " " << so.crc_x << " " << so.crc_y << " " << so.events.size() << " "
             << so.saturated << " " << (so.ok ? "" : one_line(so.error)) << "\n";
      const std::vector<std::string> every = group ? all_gather_strings(*group, mine.str()) : std::vector<std::string>{mine.str()};
      std::vector<Outcome> all;
      for (const std::string& text : every) {
        std::istringstream is(text);
        std::string line;
        while (std::getline(is, line)) {
          std::istringstream ls(line);
          Outcome oc;
          int ok = -1;
          ls >> oc.index >> ok >> oc.cx >> oc.cy >> oc.nev >> oc.sat;
          SM_CHECK(ls && (ok == 0 || ok == 1) && oc.index >= 0 && oc.index < static_cast<int64_t>(L.samples.size()),
                   "a malformed sample outcome in the import's exchange: '" << line << "'");
          oc.ok = ok == 1;
          std::getline(ls, oc.error);
          all.push_back(oc);
        }
      }
      std::sort(all.begin(), all.end(), [](const Outcome& a, const Outcome& b) { return a.index < b.index; });
      for (size_t k = 1; k < all.size(); ++k)
        SM_CHECK(all[k].index != all[k - 1].index, "sample " << all[k].index << " reported twice in the import's exchange");
      // Rows, event offsets, crc32s and counts, in sample order (the same on every rank).
      std::vector<int64_t> row_of(all.size(), -1), ev_first(all.size(), 0);
      int64_t need = 0;
      for (size_t k = 0; k < all.size(); ++k) {
        const Outcome& oc = all[k];
        const EventSampleRef& ref = L.samples[oc.index];
        if (!oc.ok) {
          ++st.skipped;
          if (st.skipped_files.size() < 100) st.skipped_files.push_back(oc.error);
          if (is_root()) SM_WARN("skipped: " << oc.error);
          continue;
        }
        const int s = split_index(ref.split);
        row_of[k] = st.rows[s]++;
        ev_first[k] = st.events[s];
        st.events[s] += oc.nev;
        st.crc_x[s] = crc32_concat(st.crc_x[s], oc.cx, w.row_bytes());
        st.crc_y[s] = crc32_concat(st.crc_y[s], oc.cy, 8);
        st.per_class[s][static_cast<size_t>(ref.label)]++;
        st.saturated += oc.sat;
        need += w.row_bytes() + 16 + (o.events ? oc.nev * 13 + 8 : 0);
      }
      // Room for the round's writes (uncompressed, so an upper bound) on every rank.
      agree([&] {
        struct stat sb {};
        const int64_t now = ::stat(tmp.c_str(), &sb) == 0 ? static_cast<int64_t>(sb.st_size) : 0;
        rlimit rl{};
        if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            static_cast<int64_t>(rl.rlim_cur) < now + need + (1 << 20))
          SM_INPUT_ERROR(o.out << ": not written: the next samples need up to " << need << " more bytes, above the file-size "
                               << "limit (ulimit -f) of " << rl.rlim_cur << " bytes (" << where_am_i() << "); the import so "
                               << "far is kept in " << tmp << ": raise the limit and rerun the same command to resume");
        struct statvfs sv {};
        if (is_root() && statvfs(fs::absolute(tmp).parent_path().c_str(), &sv) == 0 &&
            static_cast<double>(sv.f_bavail) * sv.f_frsize < static_cast<double>(need + (1 << 20)))
          SM_INPUT_ERROR(o.out << ": not written: disk full: the next samples need up to " << need << " bytes, "
                               << static_cast<int64_t>(static_cast<double>(sv.f_bavail) * sv.f_frsize) << " are free; the "
                               << "import so far is kept in " << tmp << ": free some space and rerun the same command to resume");
      });
      std::unordered_map<int64_t, size_t> mine_at;  // sample index -> position in outs
      for (size_t k = 0; k < outs.size(); ++k) mine_at[outs[k].index] = k;
      // This rank's rows, per split, in row order (its samples are ascending).
      for (Split s : {Split::Train, Split::Test}) {
        EventRows rows;
        for (size_t k = 0; k < all.size(); ++k) {
          if (row_of[k] < 0 || L.samples[all[k].index].split != s) continue;
          const auto pos = mine_at.find(all[k].index);
          if (pos == mine_at.end()) continue;  // another rank's
          const SampleOut* it = &outs[pos->second];
          rows.rows.push_back(row_of[k]);
          rows.x.insert(rows.x.end(), it->x.begin(), it->x.end());
          rows.y.push_back(L.samples[it->index].label);
          rows.n_frames.push_back(it->n_frames);
          if (o.events) {
            rows.ev_first.push_back(ev_first[k]);
            rows.ev_count.push_back(it->events.size());
            const EventStream& e = it->events;
            rows.ev_t.insert(rows.ev_t.end(), e.t.begin(), e.t.end());
            rows.ev_x.insert(rows.ev_x.end(), e.x.begin(), e.x.end());
            rows.ev_y.insert(rows.ev_y.end(), e.y.begin(), e.y.end());
            rows.ev_p.insert(rows.ev_p.end(), e.p.begin(), e.p.end());
          }
        }
        collective(std::string("writing a round of /") + split_name(s) + " into " + tmp,
                   [&] { w.write(s, rows, st.events[split_index(s)]); });
      }
      st.next_unit = u1;
      st.rounds_done = r + 1;
      collective("recording the import's progress in " + tmp, [&] {
        w.file().set_attr("import_state", st.to_text());
        w.flush();
      });
      // SIGTERM / SIGUSR1 (Slurm's warning before the time limit): the ranks agree to stop here,
      // the round's progress is in the .tmp; exit 0, and the same command resumes.
      if (const char* k = std::getenv("SPIKEMESH_TEST_SIGNAL_AFTER_ROUND"); k && std::atoll(k) == r + 1 && is_root())
        std::raise(SIGUSR1);  // test hook: Slurm's warning arriving at rank 0 alone
      const bool stop = group ? any_rank(*group, stop_signal() != 0) : stop_signal() != 0;
      if (stop && u1 < nunits) {
        collective("closing " + tmp, [&] { w.close(); });
        if (is_root())
          SM_WARN("import stopped by a signal after " << st.rows[0] + st.rows[1] << " samples (" << u1 << " of "
                                                     << nunits << " files); its progress is in " << tmp
                                                     << ": rerun the same command to resume");
        EventImportResult res;
        res.train = st.rows[0];
        res.test = st.rows[1];
        res.stopped = true;
        return res;
      }
      // Test hook (tests/e2e/event_import.sh): die like a killed job right after round k is saved.
      if (const char* k = std::getenv("SPIKEMESH_TEST_KILL_AFTER_ROUND"); k && std::atoll(k) == r + 1) {
        if (group) group->barrier();
        std::raise(SIGKILL);
      }
      if (is_root() && o.progress) {
        const double el = std::chrono::duration<double>(Clock::now() - run_start).count();
        const double done = static_cast<double>(u1), left = static_cast<double>(nunits - u1);
        const double rate = static_cast<double>(files_this_run) * nranks / std::max(el, 1e-9);
        if (u1 == nunits || std::chrono::duration<double>(Clock::now() - last_print).count() >= 2.0) {
          last_print = Clock::now();
          char line[200];
          std::snprintf(line, sizeof line, "  %lld/%lld files (%.0f%%), %.0f files/s, ETA %s", static_cast<long long>(u1),
                        static_cast<long long>(nunits), 100.0 * done / static_cast<double>(nunits), rate,
                        fmt_seconds(rate > 0 ? left / rate : 0).c_str());
          SM_INFO(line);
        }
      }
    }

    // ---- finish: extents, attributes, close, rename ----------------------------------------
    collective("finishing " + tmp, [&] {
      w.finish(st.rows[0], st.rows[1], st.events[0], st.events[1]);
      write_dataset_attributes(w.file(), L, source, spec, S, stored, deflate, o.events, st);
      SM_H5_CHECK(H5Adelete(w.file().id(), "import_state"));
      w.close();
    });
  } catch (const Error&) {
    // Every rank is here (each step is agreed): close the .tmp together; keep it for a resume
    // when a round finished (a full disk, a bad file fixed later), else remove it.
    try {
      if (w.file().file_id() >= 0) w.close();
    } catch (const Error&) {
    }
    if (is_root() && st.next_unit == 0) std::remove(tmp.c_str());
    throw;
  }
  if (group) group->barrier();
  agree([&] {
    if (!is_root()) return;
    if (fs::exists(o.out) && !o.overwrite)
      SM_INPUT_ERROR("--out " << o.out << ": a file appeared there during the import; the new one is " << tmp);
    if (std::rename(tmp.c_str(), o.out.c_str()) != 0)
      SM_INPUT_ERROR(o.out << ": cannot move the imported dataset into place from " << tmp);
  });

  EventImportResult res;
  res.train = st.rows[0];
  res.test = st.rows[1];
  res.skipped = st.skipped;
  res.saturated = st.saturated;
  res.files = nunits;
  res.resumed = resumed;
  res.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (is_root()) {
    SM_INFO("wrote " << o.out << ": " << res.train << " train + " << res.test << " test samples, " << L.class_names.size()
                     << " classes, in " << fmt_seconds(res.seconds) << " (" << static_cast<int64_t>(nunits / std::max(res.seconds, 1e-9))
                     << " files/s)" << (resumed ? ", resumed" : ""));
    if (res.skipped) SM_WARN(res.skipped << " sample(s) skipped (--skip-bad); listed in the file's 'skipped' attribute");
    if (res.saturated)
      SM_WARN(res.saturated << " value(s) saturated at the maximum of " << stored_type_name(stored)
                            << " (a pixel with more events than it holds); --dtype u16 or f32 keeps them");
  }
  return res;
}

}  // namespace sm
