// checkpoint_verify.cpp — a checkpoint file checked problem by problem (io/checkpoint.h
// scan_checkpoint: what `spikemesh ckpt verify` reports), the checksum verification of the
// resume path (verify_checkpoint_checksums: the first problem of the same checksum pass), and
// the reader's rules for a user's file shared with checkpoint_read.cpp (a damaged file is an
// Input error naming it; every tensor carries a 32-bit crc32 attribute).
// Invariant: scan_checkpoint never throws for a damaged, truncated or foreign file; every
// problem it finds is one line naming the file and the dataset or /meta field.
#include <map>
#include <set>

#include "checkpoint_internal.h"
#include "spikemesh/core/log.h"

namespace sm {
namespace ckpt {

std::string library_detail(const std::string& what) {
  const std::string me = where_am_i();
  size_t at = what.find(" (" + me + ", ");
  if (at == std::string::npos) return what;
  at = what.find("): ", at);
  return at == std::string::npos ? what : what.substr(at + 3);
}

void reading(const std::string& path, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Library) throw;
    SM_INPUT_ERROR(path << ": cannot read this checkpoint (truncated or damaged file?): " << library_detail(e.what()));
  }
}

uint32_t required_crc(const std::string& path, const H5Group& g, const std::string& name, const std::string& rel) {
  const int64_t crc = stored_crc(g, name);
  if (crc < 0)
    SM_INPUT_ERROR(path << ": dataset /" << rel
                        << " has no crc32 attribute: damaged or not written by spikemesh (every tensor of a "
                           "spikemesh checkpoint carries one)");
  if (crc > 0xffffffffLL)
    SM_INPUT_ERROR(path << ": dataset /" << rel << " has a crc32 attribute of " << crc
                        << ", not a 32-bit checksum: damaged or not written by spikemesh");
  return static_cast<uint32_t>(crc);
}

}  // namespace ckpt

namespace {

// The message of `e`, raised while reading `path`, as one problem line naming the file.
std::string problem_of(const std::string& path, const Error& e) {
  if (e.kind() != ErrorKind::Library) return e.what();
  return path + ": cannot read this checkpoint (truncated or damaged file?): " + ckpt::library_detail(e.what());
}

// Every dataset of `f` against its crc32 attribute; each problem appended to `scan` (counts
// too). `first_only`: stop at the first problem.
void scan_checksums(const std::string& path, const H5File& f, CheckpointScan& scan, bool first_only) {
  struct Stop {};
  try {
    ckpt::for_each_dataset(f.root(), "", [&](const H5Group& g, const std::string& name, const std::string& rel) {
      try {
        ++scan.tensors;
        const uint32_t want = ckpt::required_crc(path, g, name, rel);
        const Tensor t = g.read(name);
        scan.bytes += static_cast<int64_t>(t.nbytes());
        if (want != ckpt::crc_of(t)) SM_INPUT_ERROR(path << ": dataset /" << rel << " is corrupted (checksum mismatch)");
      } catch (const Error& e) {
        scan.problems.push_back(e.kind() == ErrorKind::Library
                                    ? path + ": dataset /" + rel + " cannot be read (truncated or damaged file?): " +
                                          ckpt::library_detail(e.what())
                                    : std::string(e.what()));
        if (first_only) throw Stop{};
      }
    });
  } catch (const Stop&) {
  } catch (const Error& e) {  // the file's groups themselves cannot be listed
    scan.problems.push_back(problem_of(path, e));
  }
}

// Expected tensors (path -> shape) against the file: missing, misshapen and extra ones.
void scan_completeness(const std::string& path, const H5File& f, const std::vector<TensorShard>& expected,
                       CheckpointScan& scan) {
  std::map<std::string, Shape> want;
  std::vector<std::string> order;
  for (const TensorShard& s : expected)
    if (want.emplace(s.path, s.shape).second) order.push_back(s.path);
  const std::string model = scan.info_ok ? " of model '" + scan.info.model + "'" : "";
  try {
    for (const std::string& p : order) {
      if (!f.has_dataset(p)) {
        scan.problems.push_back(path + ": incomplete: tensor /" + p + model + " (shape " + shape_str(want[p]) +
                                ") is missing");
        continue;
      }
      const Shape fs = f.dataset_shape(p);
      if (fs != want[p])
        scan.problems.push_back(path + ": incomplete: tensor /" + p + " has shape " + shape_str(fs) +
                                " in the file, the whole tensor" + model + " is " + shape_str(want[p]));
    }
    ckpt::for_each_dataset(f.root(), "", [&](const H5Group&, const std::string&, const std::string& rel) {
      if (!want.count(rel))
        scan.problems.push_back(path + ": dataset /" + rel + " is not a tensor" + model + " or of its optimizer" +
                                (scan.info_ok && !scan.info.optimizer.empty() ? " '" + scan.info.optimizer + "'" : ""));
    });
  } catch (const Error& e) {
    scan.problems.push_back(problem_of(path, e));
  }
}

}  // namespace

CheckpointScan scan_checkpoint(const std::string& path, const std::vector<TensorShard>* expected) {
  CheckpointScan scan;
  H5File f;
  try {
    ckpt::reading(path, [&] { f = H5File::open(path); });
  } catch (const Error& e) {
    scan.problems.push_back(e.what());
    return scan;
  }
  try {
    scan.info = read_checkpoint_info(path);
    scan.info_ok = true;
  } catch (const Error& e) {
    scan.problems.push_back(e.what());
  }
  scan_checksums(path, f, scan, false);
  if (expected) scan_completeness(path, f, *expected, scan);
  return scan;
}

void verify_checkpoint_checksums(const std::string& path) {
  CheckpointScan scan;
  H5File f;
  ckpt::reading(path, [&] { f = H5File::open(path); });
  scan_checksums(path, f, scan, true);
  if (!scan.problems.empty()) SM_INPUT_ERROR(scan.problems.front());
}

}  // namespace sm
