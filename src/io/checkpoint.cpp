// checkpoint.cpp — atomic, checksummed, full-logical-shape checkpoints.
#include "spikemesh/io/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iomanip>
#include <sstream>

#include "spikemesh/core/log.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/io/state_dict.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/optimizer.h"

namespace sm {

namespace {
uint32_t crc_of(const Tensor& t) {
  uLong c = crc32(0L, Z_NULL, 0);
  const Bytef* p = static_cast<const Bytef*>(t.raw());
  size_t n = t.nbytes();
  while (n) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

// Visits every dataset below `g` (recursively), with its path relative to g.
void for_each_dataset(const H5Group& g, const std::string& prefix,
                      const std::function<void(const H5Group&, const std::string&, const std::string&)>& f) {
  for (const std::string& d : g.list_datasets()) f(g, d, prefix + d);
  for (const std::string& s : g.list_groups()) for_each_dataset(g.open_group(s), prefix + s + "/", f);
}

// Writes `n` bytes as the whole content of `path`, then fsyncs it. Every failure (full disk,
// file-size limit, I/O error) is an Input error naming the file; nothing is left half-open.
void write_file_synced(const std::string& path, const char* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) SM_INPUT_ERROR(path << ": cannot create (" << std::strerror(errno) << ")");
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;  // SIGTERM/SIGUSR1 handlers do not restart calls
    if (w <= 0) {
      int e = w < 0 ? errno : ENOSPC;
      ::close(fd);
      SM_INPUT_ERROR(path << ": write failed (" << std::strerror(e) << ")");
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  int rc = ::fsync(fd), e = errno;
  if (::close(fd) != 0 && rc == 0) rc = -1, e = errno;
  if (rc != 0) SM_INPUT_ERROR(path << ": fsync failed (" << std::strerror(e) << ")");
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) SM_INPUT_ERROR(path << ": cannot open for fsync");
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) SM_INPUT_ERROR(path << ": fsync failed (disk full or I/O error)");
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() == 17 && n.rfind("ckpt_", 0) == 0 && n.substr(14) == ".h5")
      out.emplace_back(std::stoll(n.substr(5, 9)), dir + "/" + n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  std::ostringstream os;
  os << dir << "/ckpt_" << std::setw(9) << std::setfill('0') << step << ".h5";
  return os.str();
}

std::string save_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const TrainState& st,
                            const std::string& config_toml, const std::string& precision, int keep) {
  const std::string final_path = checkpoint_path(dir, st.step), tmp = final_path + ".tmp";
  try {
    // The file is built in memory (HDF5 core driver, no backing store) and written out below
    // with plain POSIX calls: a disk-write failure inside HDF5 leaves an unclosable file that
    // crashes the library at exit (HDF5 1.10), and ours are checked and reported cleanly.
    std::vector<char> image;
    {
      H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
      if (!fapl.valid() || H5Pset_fapl_core(fapl.get(), size_t(1) << 24, 0) < 0)
        SM_INPUT_ERROR(tmp << ": cannot set up the in-memory HDF5 driver");
      H5File f = H5File::create(tmp, fapl.get());
      save_state_dict(f.root(), model);
      H5Group og = f.require_group("/optim");
      int64_t nstate = 0;
      for (const OptimState& s : opt.state()) {
        og.require_group(s.param_name).write(s.state_name, *s.value);
        ++nstate;
      }
      for_each_dataset(f.root(), "", [](const H5Group& g, const std::string& name, const std::string&) {
        g.set_attr_on(name, "crc32", static_cast<int64_t>(crc_of(g.read(name))));
      });
      H5Group m = f.require_group("/meta");
      m.set_attr("step", st.step);
      m.set_attr("epoch", st.epoch);
      m.set_attr("batch_in_epoch", st.batch_in_epoch);
      m.set_attr("seed", st.seed);
      m.set_attr("optimizer_step", opt.step_count());
      m.set_attr("optimizer", opt.config().name);
      m.set_attr("model", model.info.name);
      m.set_attr("precision", precision);
      m.set_attr("mesh", std::string("dp=1 tp=1 pp=1"));
      m.set_attr("config", config_toml);
      m.set_attr("rng", "philox4x32-10, counter-based: (seed, purpose, name, step, sample, element)");
      m.set_attr("num_optim_states", nstate);
      m.set_attr("format_version", static_cast<int64_t>(kCheckpointFormatVersion));
      m.set_attr("complete", int64_t(1));  // last: a file without it is never loaded
      f.flush();
      ssize_t size = H5Fget_file_image(f.file_id(), nullptr, 0);
      if (size <= 0) SM_INPUT_ERROR(tmp << ": cannot get the HDF5 file image");
      image.resize(static_cast<size_t>(size));
      if (H5Fget_file_image(f.file_id(), image.data(), image.size()) != size)
        SM_INPUT_ERROR(tmp << ": cannot get the HDF5 file image");
    }
    write_file_synced(tmp, image.data(), image.size());
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0) SM_INPUT_ERROR(final_path << ": rename failed");
    fsync_path(dir, true);
  } catch (const Error& e) {
    std::remove(tmp.c_str());
    SM_INPUT_ERROR("checkpoint " << final_path << " not written (the previous checkpoint is intact): " << e.what());
  }
  // Prune the oldest complete checkpoints; damaged or incomplete files neither count towards
  // `keep` nor get deleted here (find_latest_checkpoint skips them).
  std::vector<std::string> complete;
  for (const auto& c : list_checkpoints(dir)) {
    if (c.second == final_path) continue;
    try {
      read_checkpoint_info(c.second);
      complete.push_back(c.second);
    } catch (const Error&) {
    }
  }
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep - 1, 0)) < complete.size(); ++i)
    std::remove(complete[i].c_str());
  return final_path;
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
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
  ci.optimizer_step = m.attr_int("optimizer_step");
  ci.model = m.attr_string("model");
  ci.precision = m.attr_string("precision");
  ci.mesh = m.attr_string("mesh");
  ci.config_toml = m.attr_string("config");
  ci.num_optim_states = m.attr_int("num_optim_states");
  ci.num_params = f.has_group("/params") ? static_cast<int64_t>(f.open_group("/params").list_datasets().size()) : 0;
  return ci;
}

void verify_checkpoint_checksums(const std::string& path) {
  H5File f = H5File::open(path);
  for_each_dataset(f.root(), "", [&](const H5Group& g, const std::string& name, const std::string& rel) {
    Tensor t = g.read(name);
    H5Handle ds(SM_H5_CHECK(H5Dopen2(g.id(), name.c_str(), H5P_DEFAULT)), H5Dclose);
    int64_t want = -1;
    if (SM_H5_CHECK(H5Aexists(ds.get(), "crc32")) > 0) {
      H5Handle a(SM_H5_CHECK(H5Aopen(ds.get(), "crc32", H5P_DEFAULT)), H5Aclose);
      SM_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, &want));
    }
    if (want >= 0 && static_cast<uint32_t>(want) != crc_of(t))
      SM_INPUT_ERROR(path << ": dataset /" << rel << " is corrupted (checksum mismatch)");
  });
}

CheckpointInfo load_checkpoint(const std::string& path, Model& model, Optimizer& opt) {
  CheckpointInfo ci = read_checkpoint_info(path);
  if (ci.model != model.info.name)
    SM_INPUT_ERROR(path << ": checkpoint of model '" << ci.model << "', but this run builds '" << model.info.name << "'");
  verify_checkpoint_checksums(path);
  H5File f = H5File::open(path);
  load_state_dict(f.root(), model, true);
  int64_t found = 0;
  for (const OptimState& s : opt.state()) {
    std::string p = "/optim/" + s.param_name + "/" + s.state_name;
    if (!f.has_dataset(p))
      SM_INPUT_ERROR(path << ": no optimizer state " << p << " (written by optimizer '"
                          << (f.open_group("/meta").has_attr("optimizer") ? f.open_group("/meta").attr_string("optimizer") : "?")
                          << "', this run uses '" << opt.config().name << "')");
    f.read_into(p, *s.value);
    ++found;
  }
  if (found != ci.num_optim_states)
    SM_INPUT_ERROR(path << ": holds " << ci.num_optim_states << " optimizer state tensors, this run's optimizer has " << found);
  opt.set_step_count(ci.optimizer_step);
  return ci;
}

std::string find_latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
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

}  // namespace sm
