// checkpoint_read.cpp — the one checkpoint reader (io/checkpoint.h read_checkpoint): every
// rank fills the boxes it asks for, one hyperslab H5Dread per dataset (collective MPI-IO over
// the group; alone: a serial read); plus /meta and the newest complete checkpoint of a
// directory (file checks problem by problem and checksum verification: checkpoint_verify.cpp).
// Invariants:
//  * nothing is written into the caller's shards before rank 0 has checked the file against
//    the request (model, tensors, shapes, optimizer state count, every /meta field, a crc32
//    attribute on every tensor), every checksum of the file has been verified and every float
//    element read has been found finite (or --allow-nonfinite-checkpoint said to load it) — a
//    damaged, foreign or diverged checkpoint is never half-loaded;
//  * the file is the user's: a failure of HDF5 while reading it (truncated, damaged) is an
//    Input error naming it, so that the agreed error reaches the front end as one message and
//    a non-zero exit on every rank (a Library error would be printed by every rank and abort
//    the job);
//  * crc32s are combined on rank 0 from the ranks' crcs of the merged flat runs they read
//    when those runs chain over a whole tensor; every other tensor is read whole by one rank;
//  * every error reaches every rank of the group with the first failing rank's message.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "checkpoint_internal.h"
#include "spikemesh/core/toml_guard.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/text_file.h"
#include "spikemesh/io/byte_pack.h"

namespace sm {

using ckpt::Group;
using ckpt::reading;
using ckpt::required_crc;
using ckpt::Run;
using ckpt::TensorPlan;

namespace {

// ---- CheckpointInfo over the wire ----------------------------------------------------------

using bytes::get_i;
using bytes::get_s;
using bytes::put;

// Collective over the group: rank 0's `ci` everywhere.
void bcast_info(const Group& g, CheckpointInfo& ci) {
  if (!g.comm) return;
  std::string b;
  if (g.rank() == 0) {
    for (const std::string* s : {&ci.path, &ci.model, &ci.precision, &ci.mesh, &ci.config_toml, &ci.optimizer})
      put(b, *s);
    int64_t scale_bits = 0;
    std::memcpy(&scale_bits, &ci.state.loss_scale, sizeof scale_bits);
    for (int64_t v : {ci.state.step, ci.state.epoch, ci.state.batch_in_epoch, ci.state.seed, ci.optimizer_step,
                      ci.format_version, ci.num_params, ci.num_optim_states, scale_bits,
                      ci.state.loss_scale_finite_in_row, ci.state.skipped_steps})
      put(b, v);
  }
  g.bcast(b);
  if (g.rank() == 0) return;
  size_t at = 0;
  for (std::string* s : {&ci.path, &ci.model, &ci.precision, &ci.mesh, &ci.config_toml, &ci.optimizer})
    *s = get_s(b, at);
  int64_t scale_bits = 0;
  for (int64_t* v : {&ci.state.step, &ci.state.epoch, &ci.state.batch_in_epoch, &ci.state.seed, &ci.optimizer_step,
                     &ci.format_version, &ci.num_params, &ci.num_optim_states, &scale_bits,
                     &ci.state.loss_scale_finite_in_row, &ci.state.skipped_steps})
    *v = get_i(b, at);
  std::memcpy(&ci.state.loss_scale, &scale_bits, sizeof scale_bits);
}

// ---- non-finite values -----------------------------------------------------------------------

// Position in [0, n) of the first NaN/Inf of `n` elements of dtype `dt` at `p` (-1: none;
// integer dtypes have none); `kind` gets 0 NaN, 1 +Inf, 2 -Inf.
int64_t first_nonfinite(const void* p, DType dt, int64_t n, int64_t& kind) {
  auto scan = [&](auto* v) -> int64_t {
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(static_cast<double>(v[i]))) {
        kind = std::isnan(static_cast<double>(v[i])) ? 0 : (v[i] > 0 ? 1 : 2);
        return i;
      }
    return -1;
  };
  if (dt == DType::F32) return scan(static_cast<const float*>(p));
  if (dt == DType::F64) return scan(static_cast<const double*>(p));
  return -1;
}

// "[i0, i1, ...]" of flat index `flat` in `shape` (row-major).
std::string index_text(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[d] = flat % n;
    flat /= n;
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

// ---- /meta validation ------------------------------------------------------------------------

// Input error naming the file and the /meta attribute `field` unless `ok`.
void require_meta(bool ok, const std::string& path, const char* field, const std::string& value, const char* rule) {
  if (!ok)
    SM_INPUT_ERROR(path << ": /meta attribute '" << field << "' is " << value << "; " << rule
                        << " (damaged or not written by spikemesh)");
}

// Every field of `ci` (read from `path`, whose /optim holds `file_optim` datasets) in range.
void validate_info(const std::string& path, const CheckpointInfo& ci, bool has_loss_scale, int64_t file_optim) {
  auto num = [](auto v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  require_meta(ci.format_version >= 1, path, "format_version", num(ci.format_version),
               "a known checkpoint format is 1 or more");
  require_meta(ci.state.step >= 0, path, "step", num(ci.state.step), "optimizer steps done must be >= 0");
  require_meta(ci.state.epoch >= 0, path, "epoch", num(ci.state.epoch), "the epoch must be >= 0");
  require_meta(ci.state.batch_in_epoch >= 0, path, "batch_in_epoch", num(ci.state.batch_in_epoch),
               "the data cursor must be >= 0");
  require_meta(ci.state.seed >= 0, path, "seed", num(ci.state.seed), "a seed is >= 0 (as --seed)");
  require_meta(ci.optimizer_step >= 0, path, "optimizer_step", num(ci.optimizer_step),
               "the optimizer's step count must be >= 0");
  require_meta(ci.num_optim_states >= 0, path, "num_optim_states", num(ci.num_optim_states), "a count must be >= 0");
  require_meta(ci.num_optim_states == file_optim, path, "num_optim_states", num(ci.num_optim_states),
               ("the file holds " + std::to_string(file_optim) + " optimizer state tensors").c_str());
  if (has_loss_scale) {
    require_meta(std::isfinite(ci.state.loss_scale) && ci.state.loss_scale > 0, path, "loss_scale",
                 num(ci.state.loss_scale), "a loss scale must be finite and > 0");
    require_meta(ci.state.loss_scale_finite_in_row >= 0, path, "loss_scale_finite_in_row",
                 num(ci.state.loss_scale_finite_in_row), "a count must be >= 0");
    require_meta(ci.state.skipped_steps >= 0, path, "skipped_steps", num(ci.state.skipped_steps),
                 "a count must be >= 0");
  }
  require_meta(!ci.model.empty(), path, "model", "empty", "a checkpoint names its model");
  static const char* kPrecisions[] = {"fp32", "fp64", "bf16", "fp16"};
  bool known = ci.precision.empty();
  for (const char* p : kPrecisions) known = known || ci.precision == p;
  require_meta(known, path, "precision", "'" + printable_token(ci.precision) + "'", "expected fp32, fp64, bf16 or fp16");
  if (!ci.config_toml.empty()) {
    std::string why = toml_parser_bug_reason(ci.config_toml);
    if (why.empty()) try {
        (void)toml::parse(ci.config_toml);
      } catch (const toml::parse_error& e) {
        why = std::string(e.description());
      }
    require_meta(why.empty(), path, "config", "not TOML (" + printable_token(why, 80) + ")",
                 "it holds the run's resolved configuration");
  }
}

// ---- load validation (rank 0, serial open) -------------------------------------------------

// Checks the file against the requested tensors; returns per tensor {file dtype, stored crc}.
std::vector<int64_t> validate_for_load(const std::string& path, const std::vector<TensorPlan>& plans,
                                       const CheckpointMeta& expect, const CheckpointInfo& ci, bool weights_only) {
  if (!expect.model.empty() && ci.model != expect.model)
    SM_INPUT_ERROR(path << ": checkpoint of model '" << ci.model << "', but this run builds '" << expect.model << "'");
  H5File f = H5File::open(path);
  const std::string models = "checkpoint of model '" + ci.model + "', this run builds '" + expect.model + "'";
  auto misfit = [&](const std::string& what) {
    SM_INPUT_ERROR(path << ": does not fit this run's model and optimizer: " << what << " (" << models << ")");
  };
  std::vector<int64_t> out;
  std::set<std::string> wanted;
  int64_t wanted_optim = 0;
  for (const TensorPlan& t : plans) {
    wanted.insert(t.path);
    const bool optim = t.path.rfind("optim/", 0) == 0;
    wanted_optim += optim;
    if (!f.has_dataset(t.path)) {
      if (optim)
        misfit("no optimizer state /" + t.path + " (written by optimizer '" + ci.optimizer + "', this run uses '" +
               expect.optimizer + "')");
      misfit("tensor /" + t.path + " of shape " + shape_str(t.shape) + " is missing");
    }
    Shape fs = f.dataset_shape(t.path);
    if (fs != t.shape)
      misfit("tensor /" + t.path + " has shape " + shape_str(fs) + " in the file, expected " + shape_str(t.shape));
    out.push_back(static_cast<int64_t>(f.dataset_dtype(t.path)));
    out.push_back(static_cast<int64_t>(required_crc(path, f, t.path, t.path)));
  }
  for (const char* g : {"params", "buffers"}) {
    if (!f.has_group(g)) continue;
    for (const std::string& n : f.open_group(g).list_datasets())
      if (!wanted.count(std::string(g) + "/" + n)) misfit("tensor /" + std::string(g) + "/" + n + " is not in this model");
  }
  int64_t file_optim = 0;
  if (f.has_group("optim"))
    ckpt::for_each_dataset(f.open_group("optim"), "", [&](const H5Group&, const std::string&, const std::string&) {
      ++file_optim;
    });
  if (file_optim != wanted_optim && !weights_only)
    SM_INPUT_ERROR(path << ": holds " << file_optim << " optimizer state tensors, this run's optimizer ('"
                        << expect.optimizer << "') has " << wanted_optim);
  return out;
}

// What this rank read of one tensor: the union of its boxes as merged flat runs, their
// elements back to back in `buf` (file dtype), and each run's position in `buf`.
struct ReadPart {
  Tensor buf;
  std::vector<Run> runs;
  std::vector<int64_t> pos;
};

// Collective over the group (one H5Dread; alone: skipped when nothing is asked for).
ReadPart read_tensor(const Group& g, const H5File& f, const TensorPlan& t, const std::vector<TensorShard>& shards,
                     DType file_dt) {
  ReadPart part;
  std::vector<const Box*> boxes;
  for (size_t k : t.shards) boxes.push_back(&shards[k].box);
  part.runs = ckpt::union_runs(t.shape, boxes);
  int64_t count = 0;
  for (const Run& r : part.runs) {
    part.pos.push_back(count);
    count += r.len;
  }
  H5Handle ds(SM_H5_CHECK(H5Dopen2(f.id(), t.path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle fs(SM_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
  ckpt::select_boxes(fs.get(), t.shape, boxes);
  SM_CHECK(H5Sget_select_npoints(fs.get()) == count,
           "'" << t.path << "': " << count << " elements asked for, " << H5Sget_select_npoints(fs.get()) << " selected");
  H5Handle ms = ckpt::memory_space(count);
  H5Handle dxpl = ckpt::transfer_plist(g);
  static char dummy[16];
  if (count) part.buf = Tensor::empty({count}, file_dt);
  if (count || g.comm)
    SM_H5_CHECK(H5Dread(ds.get(), h5_native_type(file_dt), ms.get(), fs.get(), dxpl.get(),
                        count ? part.buf.raw() : dummy));
  return part;
}

// The elements of `box` (row-major within it) out of a rank's read `part` of the tensor.
Tensor extract(const ReadPart& part, const Shape& shape, const Box& box) {
  const std::vector<std::pair<int64_t, int64_t>> runs = box_flat_runs(shape, box);
  std::vector<int64_t> at;  // position in part.buf of each run of the box
  for (const auto& r : runs) {
    auto it = std::upper_bound(part.runs.begin(), part.runs.end(), r.first,
                               [](int64_t s, const Run& u) { return s < u.start; });
    SM_CHECK(it != part.runs.begin(), "box run at " << r.first << " not read");
    const size_t u = static_cast<size_t>(it - part.runs.begin()) - 1;
    SM_CHECK(r.first + r.second <= part.runs[u].start + part.runs[u].len, "box run at " << r.first << " not read");
    at.push_back(part.pos[u] + (r.first - part.runs[u].start));
  }
  const int64_t n = box.numel();
  bool contiguous = true;
  for (size_t i = 1; i < runs.size(); ++i) contiguous = contiguous && at[i] == at[i - 1] + runs[i - 1].second;
  if (contiguous) return part.buf.slice0(at[0], at[0] + n);  // a view
  Tensor out = Tensor::empty({n}, part.buf.dtype());
  const size_t es = dtype_size(out.dtype());
  char* d = static_cast<char*>(out.raw());
  for (size_t i = 0; i < runs.size(); ++i) {
    std::memcpy(d, static_cast<const char*>(part.buf.raw()) + at[i] * es, static_cast<size_t>(runs[i].second) * es);
    d += runs[i].second * es;
  }
  return out;
}

std::string find_latest_local(const std::string& dir) {
  auto all = ckpt::list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      read_checkpoint_info(it->second);
      verify_checkpoint_checksums(it->second);
      return it->second;
    } catch (const Error& e) {
      SM_WARN("skipping " << it->second << ": " << e.what());
    }
  }
  return "";
}

}  // namespace

// ---- info / latest ---------------------------------------------------------------

namespace {
CheckpointInfo read_info_validated(const std::string& path) {
  H5File f = H5File::open(path);
  if (!f.has_group("/meta")) SM_INPUT_ERROR(path << ": not a spikemesh checkpoint (no /meta)");
  H5Group m = f.open_group("/meta");
  if (!m.has_attr("complete") || m.attr_int("complete") != 1)
    SM_INPUT_ERROR(path << ": incomplete checkpoint (its writer did not finish)");
  CheckpointInfo ci;
  ci.path = path;
  ci.format_version = m.attr_int("format_version");
  if (ci.format_version > kCheckpointFormatVersion)
    SM_INPUT_ERROR(path << ": checkpoint format " << ci.format_version << " is newer than this spikemesh ("
                        << kCheckpointFormatVersion << ")");
  ci.state.step = m.attr_int("step");
  ci.state.epoch = m.attr_int("epoch");
  ci.state.batch_in_epoch = m.attr_int("batch_in_epoch");
  ci.state.seed = m.attr_int("seed");
  if (m.has_attr("loss_scale")) {
    ci.state.loss_scale = m.attr_double("loss_scale");
    ci.state.loss_scale_finite_in_row = m.attr_int("loss_scale_finite_in_row");
    ci.state.skipped_steps = m.attr_int("skipped_steps");
  }
  ci.optimizer_step = m.attr_int("optimizer_step");
  ci.model = m.attr_string("model");
  ci.optimizer = m.has_attr("optimizer") ? m.attr_string("optimizer") : "";
  ci.precision = m.attr_string("precision");
  ci.mesh = m.attr_string("mesh");
  ci.config_toml = m.attr_string("config");
  ci.num_optim_states = m.attr_int("num_optim_states");
  ci.num_params = f.has_group("/params") ? static_cast<int64_t>(f.open_group("/params").list_datasets().size()) : 0;
  int64_t file_optim = 0;
  if (f.has_group("optim"))
    ckpt::for_each_dataset(f.open_group("optim"), "", [&](const H5Group&, const std::string&, const std::string&) {
      ++file_optim;
    });
  validate_info(path, ci, m.has_attr("loss_scale"), file_optim);
  return ci;
}
}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& path) {
  CheckpointInfo ci;
  reading(path, [&] { ci = read_info_validated(path); });
  return ci;
}

// Collective over `group` (nullptr: alone).
CheckpointInfo read_checkpoint_info(Comm* group, const std::string& path) {
  const Group g{group};
  CheckpointInfo ci;
  g.agree([&] {
    if (g.rank() == 0) ci = read_checkpoint_info(path);
  });
  bcast_info(g, ci);
  return ci;
}

// Collective over `group` (nullptr: alone).
std::string find_latest_checkpoint(Comm* group, const std::string& dir) {
  const Group g{group};
  std::string latest;
  g.agree([&] {
    if (g.rank() == 0) latest = find_latest_local(dir);
  });
  g.bcast(latest);
  return latest;
}

// ---- load ----------------------------------------------------------------------------------

namespace {

// What rank 0 learnt of the file, on every rank: /meta, and per tensor {file dtype, stored crc}.
struct FileFacts {
  CheckpointInfo info;
  std::vector<int64_t> facts;
  DType dtype(size_t i) const { return static_cast<DType>(facts[2 * i]); }
  int64_t crc(size_t i) const { return facts[2 * i + 1]; }
};

// Step 1, collective over the group: rank 0 checks the file against the request; everyone
// learns the info, dtypes and stored crcs.
FileFacts check_file(const Group& g, const std::string& path, const std::vector<TensorPlan>& plans,
                     const CheckpointMeta& expect, bool weights_only) {
  FileFacts ff;
  g.agree([&] {
    if (g.rank() != 0) return;
    ff.info = read_checkpoint_info(path);
    reading(path, [&] { ff.facts = validate_for_load(path, plans, expect, ff.info, weights_only); });
  });
  bcast_info(g, ff.info);
  g.bcast(ff.facts);
  return ff;
}

// Step 2, collective over the group: one read per tensor of the union of this rank's boxes, in
// the file's dtype, into `parts`; returns the rows {tensor, start, len, crc} of every merged
// run read here.
std::vector<int64_t> read_tensors(const Group& g, const std::string& path, const std::vector<TensorPlan>& plans,
                                  const std::vector<TensorShard>& shards, const FileFacts& ff,
                                  std::vector<ReadPart>& parts) {
  std::vector<int64_t> crc_rows;
  H5File f;
  g.agree([&] {
    H5Handle fapl(SM_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
    if (g.comm) SM_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), g.comm->mpi_comm(), MPI_INFO_NULL));
    reading(path, [&] { f = H5File::open(path, false, fapl.get()); });
  });
  parts.assign(plans.size(), ReadPart{});
  for (size_t i = 0; i < plans.size(); ++i) {
    const DType file_dt = ff.dtype(i);
    g.agree([&] { reading(path, [&] { parts[i] = read_tensor(g, f, plans[i], shards, file_dt); }); });
    g.agree([&] {
      const size_t es = dtype_size(file_dt);
      for (size_t u = 0; u < parts[i].runs.size(); ++u) {
        const Run& r = parts[i].runs[u];
        const char* p = static_cast<const char*>(parts[i].buf.raw()) + parts[i].pos[u] * static_cast<int64_t>(es);
        crc_rows.insert(crc_rows.end(), {static_cast<int64_t>(i), r.start, r.len,
                                         static_cast<int64_t>(crc32_bytes(p, static_cast<size_t>(r.len) * es))});
      }
    });
  }
  g.agree([&] { f.close(); });
  return crc_rows;
}

// Rank 0: checks every tensor whose gathered runs (rows {tensor, start, len, crc}) chain over
// it; returns, per tensor, the rank that must read it whole (round robin), or -1.
std::vector<int64_t> check_chained_crcs(const Group& g, const std::string& path, const std::vector<TensorPlan>& plans,
                                        const FileFacts& ff, const std::vector<int64_t>& all) {
  const size_t n = plans.size();
  std::vector<int64_t> reader(n, -1);
  std::vector<std::vector<std::array<int64_t, 3>>> runs(n);
  for (size_t k = 0; k + 4 <= all.size(); k += 4)
    runs[static_cast<size_t>(all[k])].push_back({all[k + 1], all[k + 2], all[k + 3]});
  int next = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t want = ff.crc(i), numel = shape_numel(plans[i].shape);
    if (want < 0) continue;
    std::sort(runs[i].begin(), runs[i].end());
    const int64_t esize = static_cast<int64_t>(dtype_size(ff.dtype(i)));
    std::map<int64_t, uint32_t> reached{{0, 0u}};  // flat offset -> crc of [0, offset)
    for (const auto& r : runs[i]) {
      auto it = reached.find(r[0]);
      if (it != reached.end() && !reached.count(r[0] + r[1]))
        reached[r[0] + r[1]] = crc32_concat(it->second, static_cast<uint32_t>(r[2]), r[1] * esize);
    }
    auto whole = reached.find(numel);
    if (whole == reached.end())
      reader[i] = next++ % g.size();
    else if (static_cast<uint32_t>(want) != whole->second)
      SM_INPUT_ERROR(path << ": dataset /" << plans[i].path << " is corrupted (checksum mismatch)");
  }
  return reader;
}

// Step 3, collective over the group: checksums combined on rank 0 where the ranks' runs chain
// over a tensor; the rest read whole by one rank each.
void verify_checksums(const Group& g, const std::string& path, const std::vector<TensorPlan>& plans,
                      const FileFacts& ff, const std::vector<int64_t>& crc_rows) {
  const std::vector<int64_t> all = g.gather(crc_rows);
  std::vector<int64_t> reader(plans.size(), -1);
  g.agree([&] {
    if (g.rank() == 0) reader = check_chained_crcs(g, path, plans, ff, all);
  });
  g.bcast(reader);
  g.agree([&] {
    reading(path, [&] {
      H5File f;
      for (size_t i = 0; i < plans.size(); ++i) {
        if (reader[i] != g.rank()) continue;
        if (f.file_id() < 0) f = H5File::open(path);
        Tensor t = f.read(plans[i].path);
        if (static_cast<uint32_t>(ff.crc(i)) != ckpt::crc_of(t))
          SM_INPUT_ERROR(path << ": dataset /" << plans[i].path << " is corrupted (checksum mismatch)");
      }
    });
  });
}

// Rows {tensor, flat index, kind} of this rank's first NaN/Inf per tensor it read.
std::vector<int64_t> first_nonfinite_rows(const FileFacts& ff, const std::vector<ReadPart>& parts) {
  std::vector<int64_t> bad_rows;
  for (size_t i = 0; i < parts.size(); ++i) {
    const DType file_dt = ff.dtype(i);
    const size_t es = dtype_size(file_dt);
    for (size_t u = 0; u < parts[i].runs.size(); ++u) {
      const char* p = static_cast<const char*>(parts[i].buf.raw()) + parts[i].pos[u] * static_cast<int64_t>(es);
      int64_t kind = 0;
      const int64_t at = first_nonfinite(p, file_dt, parts[i].runs[u].len, kind);
      if (at >= 0) {
        bad_rows.insert(bad_rows.end(), {static_cast<int64_t>(i), parts[i].runs[u].start + at, kind});
        break;  // runs are sorted: the first hit is this rank's first
      }
    }
  }
  return bad_rows;
}

// Step 3b, collective over the group: every float element read must be finite (params,
// buffers and optimizer state alike): each rank's first NaN/Inf per tensor, gathered; rank 0
// decides (the lowest flat index over the ranks is the tensor's first, since the ranks' reads
// cover what the run uses).
void check_finite(const Group& g, const std::string& path, const std::vector<TensorPlan>& plans,
                  const FileFacts& ff, const std::vector<ReadPart>& parts, const CheckpointReadOptions& opts) {
  const std::vector<int64_t> all_bad = g.gather(first_nonfinite_rows(ff, parts));
  g.agree([&] {
    if (g.rank() != 0) return;
    std::map<size_t, std::pair<int64_t, int64_t>> first;  // tensor -> (flat index, kind), lowest index
    for (size_t k = 0; k + 3 <= all_bad.size(); k += 3) {
      const size_t i = static_cast<size_t>(all_bad[k]);
      auto it = first.find(i);
      if (it == first.end() || all_bad[k + 1] < it->second.first) first[i] = {all_bad[k + 1], all_bad[k + 2]};
    }
    if (first.empty()) return;
    static const char* kKind[] = {"NaN", "+Inf", "-Inf"};
    auto one = [&](size_t i) {
      const auto& f = first.at(i);
      std::ostringstream os;
      os << "/" << plans[i].path << " (first at element " << f.first << ", index " << index_text(plans[i].shape, f.first)
         << ": " << kKind[f.second] << ")";
      return os.str();
    };
    if (opts.allow_nonfinite) {
      std::ostringstream os;
      for (const auto& kv : first) os << (os.tellp() > 0 ? ", " : "") << one(kv.first);
      SM_WARN(path << ": loading non-finite values (--allow-nonfinite-checkpoint) in " << first.size()
                   << " tensor" << (first.size() > 1 ? "s" : "") << ": " << os.str());
      return;
    }
    const size_t i0 = first.begin()->first;
    SM_INPUT_ERROR(path << ": tensor " << one(i0) << " holds a non-finite value"
                        << (first.size() > 1 ? " (and " + std::to_string(first.size() - 1) + " more tensors)" : "")
                        << ": the run that wrote it diverged or the file was altered; resume from an earlier "
                           "checkpoint, or pass --allow-nonfinite-checkpoint to load it anyway");
  });
}

// Step 4, collective over the group (agreed): only now write into the callers' tensors.
void fill_shards(const Group& g, const std::vector<TensorPlan>& plans, const std::vector<ReadPart>& parts,
                 std::vector<TensorShard>& shards) {
  g.agree([&] {
    for (size_t i = 0; i < plans.size(); ++i)
      for (size_t k : plans[i].shards) {
        TensorShard& s = shards[k];
        if (s.box.empty()) continue;
        Tensor src = extract(parts[i], plans[i].shape, s.box);
        if (src.dtype() != s.data.dtype()) src = src.to_dtype(s.data.dtype());
        Tensor dst = s.data.view({src.numel()});
        dst.copy_from(src);
      }
  });
}

}  // namespace

// Collective over `group` (nullptr: alone); see io/checkpoint.h.
CheckpointInfo read_checkpoint(Comm* group, const std::string& path, std::vector<TensorShard>& shards,
                               const CheckpointMeta& expect, const CheckpointReadOptions& opts) {
  const Group g{group};
  std::vector<TensorPlan> plans;
  g.agree([&] { plans = ckpt::plan_tensors(shards, false); });
  ckpt::require_same_everywhere(g, plans, "load|" + path + "|" + expect.model + "|" + expect.optimizer,
                                "read_checkpoint");
  const FileFacts ff = check_file(g, path, plans, expect, opts.weights_only);  // 1. the file against the request
  std::vector<ReadPart> parts;                              // 2. this rank's boxes, read
  const std::vector<int64_t> crc_rows = read_tensors(g, path, plans, shards, ff, parts);
  verify_checksums(g, path, plans, ff, crc_rows);  // 3. every checksum
  check_finite(g, path, plans, ff, parts, opts);   // 3b. no NaN/Inf unless allowed
  fill_shards(g, plans, parts, shards);            // 4. only now into the callers' tensors
  return ff.info;
}

}  // namespace sm
