// import_events.cpp — the parallel, resumable import of import_events.h: options and listing
// agreed over the ranks, the resume (import_state.h), rounds of decode + integrate + convert per
// rank (decode_units), every sample's outcome gathered and rows assigned in sample order, the
// room checked, the collective writes (event_h5_writer.h), progress lines, the signal stop, the
// final attributes (write_dataset_attributes of import_state.h) and the rename.
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
  bool no_event = false;  // the sample's stream is empty (zero frames)
  EventStream events;     // kept with --events
};

// A sample's outcome as every rank learns it (the exchange after each round).
struct Outcome {
  int64_t index = -1;
  bool ok = false;
  uint32_t cx = 0, cy = 0;
  int64_t nev = 0, sat = 0;
  bool no_event = false;
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
                                    int64_t my0, int64_t my1, const FrameSpec& spec, int out_h, int out_w,
                                    StoredType stored, const EventImportOptions& o,
                                    const std::function<void(int64_t)>& after_file) {
  const int64_t out_elems = static_cast<int64_t>(spec.T) * 2 * out_h * out_w;
  FrameScratch scratch;
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
          int64_t n_frames = 0;
          const float* frames = integrate_and_resize(src, 0, src.size(), spec, out_h, out_w, scratch, what, &n_frames);
          if (n_frames > std::numeric_limits<int32_t>::max())
            SM_INPUT_ERROR(what << ": " << n_frames << " fixed-duration frames (a larger --duration-us?)");
          so.n_frames = static_cast<int32_t>(n_frames);
          so.no_event = src.size() == 0;
          so.saturated = frames_to_stored(frames, out_elems, stored, so.x);
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

const char* dataset_title(const std::string& d) {
  return d == "cifar10-dvs"      ? "CIFAR10-DVS"
         : d == "dvs128-gesture" ? "DVS128 Gesture"
         : d == "n-caltech101"   ? "N-Caltech101"
                                 : "N-MNIST";
}

// One import's shared state: the agreed options and listing, the file's shape, the progress
// (ImportState) and the writer. Every rank holds the same values except its own decoded samples.
struct ImportRun {
  const EventImportOptions& o;
  Comm* group;
  int rank = 0, nranks = 1;
  FrameSpec spec;
  StoredType stored = StoredType::U8;
  EventDatasetLayout L;
  int deflate = 0;
  int out_h = 0, out_w = 0;  // the stored frames: the sensor's, or --size squared
  std::string fingerprint, source, tmp;
  std::vector<std::vector<int64_t>> units;  // per unit (a file): its sample indices
  int64_t nunits = 0, per_round = 0;
  EventFileShape shape;
  ImportState st;
  EventH5Writer w;
  Clock::time_point last_print, run_start;
  int64_t files_this_run = 0;

  ImportRun(const EventImportOptions& opts, Comm* g)
      : o(opts), group(g), rank(g ? g->rank() : 0), nranks(g ? g->size() : 1) {}
  bool is_root() const { return rank == 0; }
  void agree(const std::function<void()>& f) const { agree_on_error(group, f); }
  // A collective HDF5 step: an arrival check and the --comm-timeout deadline around it (a rank
  // that fails before the library call cannot leave the others waiting inside MPI-IO), and
  // every rank throws the lowest failing rank's error.
  void collective(const std::string& what, const std::function<void()>& f) const {
    if (group) guarded_collective(*group, what, [&] { agree_on_error(group, f); });
    else f();
  }
};

// The options checked and agreed, the dataset listed, the frame size, type and deflate fixed.
void resolve_import_options(ImportRun& run) {
  const EventImportOptions& o = run.o;
  run.agree([&] {
    if (o.T < 1) SM_INPUT_ERROR("--T " << o.T << ": must be >= 1");
    if (o.duration_us < 0) SM_INPUT_ERROR("--duration-us " << o.duration_us << ": must be > 0");
    if (o.size < 0) SM_INPUT_ERROR("--size " << o.size << ": must be > 0");
    if (o.deflate < -1 || o.deflate > 9) SM_INPUT_ERROR("--deflate " << o.deflate << ": must be 0..9 (or -1: auto)");
    if (o.out.empty()) SM_INPUT_ERROR("--out: give the output file");
    run.spec.T = o.T;
    run.spec.split_by = o.duration_us > 0 ? SplitBy::Duration : split_by_from_name(o.split_by);
    run.spec.duration_us = o.duration_us;
    run.stored = stored_type_from_name(o.dtype.empty() ? (o.size > 0 ? "f32" : "u8") : o.dtype);
    if (fs::exists(o.out) && !o.overwrite)
      SM_INPUT_ERROR("--out " << o.out << ": the file exists (give --overwrite to replace it once the new one is complete)");
    const fs::path dir = fs::absolute(o.out).parent_path();
    if (!fs::is_directory(dir)) SM_INPUT_ERROR("--out " << o.out << ": the folder " << dir.string() << " does not exist");
    run.L = list_event_dataset(o.dataset, o.from, o.train_ratio, run.spec.split_by == SplitBy::Duration,
                               o.include_background);
  });
  run.spec.height = run.L.sensor_h;
  run.spec.width = run.L.sensor_w;
  // Auto: deflate integer frames (event counts, mostly zeros: 4x smaller at 128x128) but not
  // float ones (resized frames: 20% smaller for 14x slower reads; docs/datasets.md).
  run.deflate = o.deflate >= 0 ? o.deflate : (run.stored == StoredType::U8 || run.stored == StoredType::U16) ? 1 : 0;
  run.out_h = o.size > 0 ? o.size : run.L.sensor_h;
  run.out_w = o.size > 0 ? o.size : run.L.sensor_w;
  if (run.group)
    check_same_text(*run.group, run.L.describe(), "the listing of --from " + o.from + " (is it on a shared file system?)");
}

// "S" of square frames (as fingerprints of earlier versions spell it, so their interrupted
// imports still resume), "HxW" otherwise.
std::string frame_size_text(int h, int w) {
  return h == w ? std::to_string(h) : std::to_string(h) + "x" + std::to_string(w);
}

// The fingerprint of what decides the rows (a resume must match it) and the 'source' attribute.
void fingerprint_and_source(ImportRun& run) {
  std::ostringstream canon;
  // Not the rank count nor --files-per-round: the rows do not depend on them, so a resume (a
  // requeued job on another node count) may change them.
  canon << "semantics 1|" << run.L.describe() << "|T " << run.spec.T << " " << split_by_name(run.spec.split_by) << " "
        << run.spec.duration_us << " S " << frame_size_text(run.out_h, run.out_w) << " " << stored_type_name(run.stored)
        << " ev " << run.o.events
        << " skip " << run.o.skip_bad << " deflate " << run.deflate;
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(text_hash(canon.str())));
  run.fingerprint = b;
  // Every rank writes the same attribute values: rank 0's absolute path (working directories may differ).
  const std::string source0 =
      std::string(dataset_title(run.L.dataset)) + " (" + fs::absolute(run.L.root).lexically_normal().string() + ")";
  run.source = run.group ? broadcast_string(*run.group, source0, 0) : source0;
}

// The work units and rounds, and the output file's shape.
void plan_units_and_shape(ImportRun& run) {
  const EventDatasetLayout& L = run.L;
  // A unit is one file and the samples it gives; units are in sample order when one file is
  // one sample (rounds of files_per_round per rank), else (Gesture) one round holds them all.
  if (!L.multi_sample_files()) {
    for (int64_t i = 0; i < static_cast<int64_t>(L.samples.size()); ++i) run.units.push_back({i});
  } else {
    run.units.resize(L.files.size());
    for (int64_t i = 0; i < static_cast<int64_t>(L.samples.size()); ++i) run.units[L.samples[i].file].push_back(i);
  }
  run.nunits = static_cast<int64_t>(run.units.size());
  run.per_round = L.multi_sample_files() ? run.nunits : std::max<int64_t>(1, run.o.files_per_round) * run.nranks;
  EventFileShape& shape = run.shape;
  shape.T = run.spec.T;
  shape.height = run.out_h;
  shape.width = run.out_w;
  shape.stored = run.stored;
  shape.train_rows = L.train_size;
  shape.test_rows = L.test_size;
  shape.events = run.o.events;
  shape.n_frames = run.spec.split_by == SplitBy::Duration;
  shape.deflate = run.deflate;
  run.tmp = run.o.out + ".tmp";
}

// --out's folder must be the same on every rank (one file written together): rank 0 leaves a
// token there that every rank must read back (node-local storage in a multi-node job fails).
void check_shared_out_folder(const ImportRun& run) {
  if (!run.group || run.nranks <= 1) return;
  const std::string probe = run.tmp + ".probe";
  const std::string token = run.fingerprint + "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::string expect = broadcast_string(*run.group, token, 0);
  run.agree([&] {
    if (!run.is_root()) return;
    std::ofstream(probe) << expect;
    if (!std::ifstream(probe)) SM_INPUT_ERROR("--out " << run.o.out << ": cannot write in its folder");
  });
  bool seen = false;
  run.agree([&] {
    std::string got;
    std::ifstream in(probe);
    std::getline(in, got);
    seen = got == expect;
  });
  const bool all_seen = !any_rank(*run.group, !seen);
  if (run.is_root()) std::remove(probe.c_str());
  if (!all_seen)
    run.agree([&] {
      if (!seen)
        SM_INPUT_ERROR("--out " << run.o.out << ": its folder is not the one rank 0 writes in (" << where_am_i()
                                << "): every rank writes one file together, so --out must be on a file system "
                                << "every rank shares (not node-local storage)");
    });
}

// This rank's share of a round decoded (units my0..my1), with progress lines for long recordings.
std::vector<SampleOut> decode_my_units(ImportRun& run, int64_t my0, int64_t my1) {
  std::vector<SampleOut> outs;
  run.agree([&] {
    const int oh = run.out_h, ow = run.out_w;
    outs = decode_units(run.L, run.units, my0, my1, run.spec, oh, ow, run.stored, run.o, [&](int64_t u) {
      ++run.files_this_run;
      if (run.is_root() && run.o.progress && run.L.multi_sample_files() &&
          std::chrono::duration<double>(Clock::now() - run.last_print).count() >= 5.0) {
        run.last_print = Clock::now();
        SM_INFO("  rank 0: " << u - my0 + 1 << "/" << my1 - my0 << " recordings decoded");
      }
    });
  });
  return outs;
}

// Every rank learns every sample's outcome, one line each: "index ok crc_x crc_y events
// saturated error" (the error made one line: a file name or message cannot forge a line).
std::vector<Outcome> gather_outcomes(const ImportRun& run, const std::vector<SampleOut>& outs) {
  std::ostringstream mine;
  for (const SampleOut& so : outs)
    mine << so.index << " " << so.ok << " " << so.crc_x << " " << so.crc_y << " " << so.events.size() << " "
         << so.saturated << " " << so.no_event << " " << (so.ok ? "" : one_line(so.error)) << "\n";
  const std::vector<std::string> every =
      run.group ? all_gather_strings(*run.group, mine.str()) : std::vector<std::string>{mine.str()};
  std::vector<Outcome> all;
  for (const std::string& text : every) {
    std::istringstream is(text);
    std::string line;
    while (std::getline(is, line)) {
      std::istringstream ls(line);
      Outcome oc;
      int ok = -1, no_event = 0;
      ls >> oc.index >> ok >> oc.cx >> oc.cy >> oc.nev >> oc.sat >> no_event;
      oc.no_event = no_event == 1;
      SM_CHECK(ls && (ok == 0 || ok == 1) && oc.index >= 0 && oc.index < static_cast<int64_t>(run.L.samples.size()),
               "a malformed sample outcome in the import's exchange: '" << line << "'");
      oc.ok = ok == 1;
      std::getline(ls, oc.error);
      all.push_back(oc);
    }
  }
  std::sort(all.begin(), all.end(), [](const Outcome& a, const Outcome& b) { return a.index < b.index; });
  for (size_t k = 1; k < all.size(); ++k)
    SM_CHECK(all[k].index != all[k - 1].index, "sample " << all[k].index << " reported twice in the import's exchange");
  return all;
}

// A round's rows, event offsets, crc32s and counts, in sample order (the same on every rank);
// returns the bytes its writes need at most.
int64_t assign_rows(ImportRun& run, const std::vector<Outcome>& all, std::vector<int64_t>& row_of,
                    std::vector<int64_t>& ev_first) {
  ImportState& st = run.st;
  row_of.assign(all.size(), -1);
  ev_first.assign(all.size(), 0);
  int64_t need = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    const Outcome& oc = all[k];
    const EventSampleRef& ref = run.L.samples[oc.index];
    if (!oc.ok) {
      ++st.skipped;
      if (st.skipped_files.size() < 100) st.skipped_files.push_back(oc.error);
      if (run.is_root()) SM_WARN("skipped: " << oc.error);
      continue;
    }
    const int s = split_index(ref.split);
    row_of[k] = st.rows[s]++;
    ev_first[k] = st.events[s];
    st.events[s] += oc.nev;
    st.crc_x[s] = crc32_concat(st.crc_x[s], oc.cx, run.w.row_bytes());
    st.crc_y[s] = crc32_concat(st.crc_y[s], oc.cy, 8);
    st.per_class[s][static_cast<size_t>(ref.label)]++;
    st.saturated += oc.sat;
    if (oc.no_event) {
      const bool whole = ref.t_begin == std::numeric_limits<int64_t>::min();
      const std::string where =
          one_line(run.L.files[static_cast<size_t>(ref.file)] + (whole ? "" : " (sample " + ref.name + ")"));
      if (run.is_root() && st.empty[0] + st.empty[1] < 10)
        SM_WARN("no event in " << where << ": imported as zero frames, as SpikingJelly does");
      ++st.empty[s];
      if (st.empty_samples.size() < 100) st.empty_samples.push_back(where);
    }
    need += run.w.row_bytes() + 16 + (run.o.events ? oc.nev * 13 + 8 : 0);
  }
  return need;
}

// Room for the round's writes (uncompressed, so an upper bound) on every rank.
void check_room(const ImportRun& run, int64_t need) {
  const std::string& tmp = run.tmp;
  run.agree([&] {
    struct stat sb {};
    const int64_t now = ::stat(tmp.c_str(), &sb) == 0 ? static_cast<int64_t>(sb.st_size) : 0;
    rlimit rl{};
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        static_cast<int64_t>(rl.rlim_cur) < now + need + (1 << 20))
      SM_INPUT_ERROR(run.o.out << ": not written: the next samples need up to " << need << " more bytes, above the file-size "
                               << "limit (ulimit -f) of " << rl.rlim_cur << " bytes (" << where_am_i() << "); the import so "
                               << "far is kept in " << tmp << ": raise the limit and rerun the same command to resume");
    struct statvfs sv {};
    if (run.is_root() && statvfs(fs::absolute(tmp).parent_path().c_str(), &sv) == 0 &&
        static_cast<double>(sv.f_bavail) * sv.f_frsize < static_cast<double>(need + (1 << 20)))
      SM_INPUT_ERROR(run.o.out << ": not written: disk full: the next samples need up to " << need << " bytes, "
                               << static_cast<int64_t>(static_cast<double>(sv.f_bavail) * sv.f_frsize) << " are free; the "
                               << "import so far is kept in " << tmp << ": free some space and rerun the same command to resume");
  });
}

// This rank's rows of a round written, per split, in row order (its samples are ascending).
void write_my_rows(ImportRun& run, const std::vector<SampleOut>& outs, const std::vector<Outcome>& all,
                   const std::vector<int64_t>& row_of, const std::vector<int64_t>& ev_first) {
  std::unordered_map<int64_t, size_t> mine_at;  // sample index -> position in outs
  for (size_t k = 0; k < outs.size(); ++k) mine_at[outs[k].index] = k;
  for (Split s : {Split::Train, Split::Test}) {
    EventRows rows;
    for (size_t k = 0; k < all.size(); ++k) {
      if (row_of[k] < 0 || run.L.samples[all[k].index].split != s) continue;
      const auto pos = mine_at.find(all[k].index);
      if (pos == mine_at.end()) continue;  // another rank's
      const SampleOut* it = &outs[pos->second];
      rows.rows.push_back(row_of[k]);
      rows.x.insert(rows.x.end(), it->x.begin(), it->x.end());
      rows.y.push_back(run.L.samples[it->index].label);
      rows.n_frames.push_back(it->n_frames);
      if (run.o.events) {
        rows.ev_first.push_back(ev_first[k]);
        rows.ev_count.push_back(it->events.size());
        const EventStream& e = it->events;
        rows.ev_t.insert(rows.ev_t.end(), e.t.begin(), e.t.end());
        rows.ev_x.insert(rows.ev_x.end(), e.x.begin(), e.x.end());
        rows.ev_y.insert(rows.ev_y.end(), e.y.begin(), e.y.end());
        rows.ev_p.insert(rows.ev_p.end(), e.p.begin(), e.p.end());
      }
    }
    run.collective(std::string("writing a round of /") + split_name(s) + " into " + run.tmp,
                   [&] { run.w.write(s, rows, run.st.events[split_index(s)]); });
  }
}

// After round r (units up to u1) is saved: true when a signal stops the import here (the .tmp
// is closed and kept for a resume); also the test hooks that stop or kill after a round.
bool stop_after_round(ImportRun& run, int64_t r, int64_t u1) {
  // SIGTERM / SIGUSR1 (Slurm's warning before the time limit): the ranks agree to stop here,
  // the round's progress is in the .tmp; exit 0, and the same command resumes.
  if (const char* k = std::getenv("SPIKEMESH_TEST_SIGNAL_AFTER_ROUND"); k && std::atoll(k) == r + 1 && run.is_root())
    std::raise(SIGUSR1);  // test hook: Slurm's warning arriving at rank 0 alone
  const bool stop = run.group ? any_rank(*run.group, stop_signal() != 0) : stop_signal() != 0;
  if (stop && u1 < run.nunits) {
    run.collective("closing " + run.tmp, [&] { run.w.close(); });
    if (run.is_root())
      SM_WARN("import stopped by a signal after " << run.st.rows[0] + run.st.rows[1] << " samples (" << u1 << " of "
                                                 << run.nunits << " files); its progress is in " << run.tmp
                                                 << ": rerun the same command to resume");
    return true;
  }
  // Test hook (tests/e2e/event_import.sh): die like a killed job right after round k is saved.
  if (const char* k = std::getenv("SPIKEMESH_TEST_KILL_AFTER_ROUND"); k && std::atoll(k) == r + 1) {
    if (run.group) run.group->barrier();
    std::raise(SIGKILL);
  }
  return false;
}

// Rank 0's progress line after a round (every 2 s and at the end; --progress).
void print_round_progress(ImportRun& run, int64_t u1) {
  if (!run.is_root() || !run.o.progress) return;
  const double el = std::chrono::duration<double>(Clock::now() - run.run_start).count();
  const double done = static_cast<double>(u1), left = static_cast<double>(run.nunits - u1);
  const double rate = static_cast<double>(run.files_this_run) * run.nranks / std::max(el, 1e-9);
  if (u1 == run.nunits || std::chrono::duration<double>(Clock::now() - run.last_print).count() >= 2.0) {
    run.last_print = Clock::now();
    char line[200];
    std::snprintf(line, sizeof line, "  %lld/%lld files (%.0f%%), %.0f files/s, ETA %s", static_cast<long long>(u1),
                  static_cast<long long>(run.nunits), 100.0 * done / static_cast<double>(run.nunits), rate,
                  fmt_seconds(rate > 0 ? left / rate : 0).c_str());
    SM_INFO(line);
  }
}

// One round from unit u0: decode, exchange outcomes, assign rows, check room, write, record the
// progress. Returns true when a signal stopped the import after it.
bool import_round(ImportRun& run, int64_t u0) {
  const int64_t r = run.st.rounds_done, u1 = std::min(run.nunits, u0 + run.per_round), nu = u1 - u0;
  const int64_t my0 = u0 + nu * run.rank / run.nranks, my1 = u0 + nu * (run.rank + 1) / run.nranks;
  const std::vector<SampleOut> outs = decode_my_units(run, my0, my1);
  const std::vector<Outcome> all = gather_outcomes(run, outs);
  std::vector<int64_t> row_of, ev_first;
  const int64_t need = assign_rows(run, all, row_of, ev_first);
  check_room(run, need);
  write_my_rows(run, outs, all, row_of, ev_first);
  run.st.next_unit = u1;
  run.st.rounds_done = r + 1;
  run.collective("recording the import's progress in " + run.tmp, [&] {
    run.w.file().set_attr("import_state", run.st.to_text());
    run.w.flush();
  });
  if (stop_after_round(run, r, u1)) return true;
  print_round_progress(run, u1);
  return false;
}

// The rounds from the resume point, then the extents, attributes and close. Returns false when
// a signal stopped it. On an error (every rank has it) the .tmp is closed and kept for a resume
// when a round finished, else removed.
bool import_rounds(ImportRun& run) {
  try {
    run.last_print = Clock::now();
    run.run_start = Clock::now();
    run.files_this_run = 0;
    for (int64_t u0 = run.st.next_unit; u0 < run.nunits; u0 += run.per_round)
      if (import_round(run, u0)) return false;
    run.collective("finishing " + run.tmp, [&] {
      run.w.finish(run.st.rows[0], run.st.rows[1], run.st.events[0], run.st.events[1]);
      write_dataset_attributes(run.w.file(), run.L, run.source, run.spec, run.out_h, run.out_w, run.stored,
                               run.deflate, run.o.events, run.st);
      SM_H5_CHECK(H5Adelete(run.w.file().id(), "import_state"));
      run.w.close();
    });
  } catch (const Error&) {
    try {
      if (run.w.file().file_id() >= 0) run.w.close();
    } catch (const Error&) {
    }
    if (run.is_root() && run.st.next_unit == 0) std::remove(run.tmp.c_str());
    throw;
  }
  return true;
}

// The finished .tmp moved onto --out by rank 0, after every rank is done.
void move_into_place(const ImportRun& run) {
  if (run.group) run.group->barrier();
  run.agree([&] {
    if (!run.is_root()) return;
    if (fs::exists(run.o.out) && !run.o.overwrite)
      SM_INPUT_ERROR("--out " << run.o.out << ": a file appeared there during the import; the new one is " << run.tmp);
    if (std::rename(run.tmp.c_str(), run.o.out.c_str()) != 0)
      SM_INPUT_ERROR(run.o.out << ": cannot move the imported dataset into place from " << run.tmp);
  });
}

// The result of a finished import and rank 0's closing lines.
EventImportResult finished_import(const ImportRun& run, bool resumed, Clock::time_point t_start) {
  const ImportState& st = run.st;
  EventImportResult res;
  res.train = st.rows[0];
  res.test = st.rows[1];
  res.skipped = st.skipped;
  res.saturated = st.saturated;
  res.files = run.nunits;
  res.resumed = resumed;
  res.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (run.is_root()) {
    SM_INFO("wrote " << run.o.out << ": " << res.train << " train + " << res.test << " test samples, "
                     << run.L.class_names.size() << " classes, in " << fmt_seconds(res.seconds) << " ("
                     << static_cast<int64_t>(run.nunits / std::max(res.seconds, 1e-9)) << " files/s)"
                     << (resumed ? ", resumed" : ""));
    if (res.skipped) SM_WARN(res.skipped << " sample(s) skipped (--skip-bad); listed in the file's 'skipped' attribute");
    if (st.empty[0] + st.empty[1])
      SM_WARN(st.empty[0] + st.empty[1] << " recording(s) without an event (" << st.empty[0] << " train, " << st.empty[1]
                                        << " test) imported as zero frames, as SpikingJelly does; counted in the "
                                           "file's train_empty_samples / test_empty_samples, named in empty_samples");
    if (res.saturated)
      SM_WARN(res.saturated << " value(s) saturated at the maximum of " << stored_type_name(run.stored)
                            << " (a pixel with more events than it holds); --dtype u16 or f32 keeps them");
  }
  return res;
}

}  // namespace

EventImportResult import_event_dataset(const EventImportOptions& o, Comm* group) {
  const auto t_start = Clock::now();
  install_stop_signal_handlers();
  ImportRun run(o, group);
  resolve_import_options(run);
  fingerprint_and_source(run);
  plan_units_and_shape(run);
  check_shared_out_folder(run);
  run.st.fingerprint = run.fingerprint;
  for (int k = 0; k < 2; ++k) run.st.per_class[k].assign(run.L.class_names.size(), 0);
  const bool resumed = resume_import(run.tmp, run.fingerprint, run.shape, group, run.w, run.st);
  if (!resumed) run.collective("creating " + run.tmp, [&] { run.w = EventH5Writer::create(run.tmp, group, run.shape); });
  if (run.is_root())
    SM_INFO("importing " << dataset_title(run.L.dataset) << " from " << run.L.root << ": " << run.L.files.size()
                         << " files, " << run.L.train_size << " train + " << run.L.test_size << " test samples -> " << o.out
                         << " [T " << run.spec.T << ", 2, " << run.out_h << ", " << run.out_w << "] " << stored_type_name(run.stored)
                         << ", split by " << split_by_name(run.spec.split_by) << ", " << run.nranks << " rank(s)");
  if (!import_rounds(run)) {
    EventImportResult res;
    res.train = run.st.rows[0];
    res.test = run.st.rows[1];
    res.stopped = true;
    return res;
  }
  move_into_place(run);
  return finished_import(run, resumed, t_start);
}

}  // namespace sm
