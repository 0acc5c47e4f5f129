// checkpoint_files.cpp — checksums, fsynced writes, listing/pruning and /meta shared by the
// checkpoint writer (checkpoint_write.cpp) and reader (checkpoint_read.cpp). All local.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint_internal.h"

namespace sm {
namespace ckpt {

uint32_t crc_of(const Tensor& t) { return crc32_bytes(t.raw(), t.nbytes(), 0); }

void for_each_dataset(const H5Group& g, const std::string& prefix,
                      const std::function<void(const H5Group&, const std::string&, const std::string&)>& f) {
  for (const std::string& d : g.list_datasets()) f(g, d, prefix + d);
  for (const std::string& s : g.list_groups()) for_each_dataset(g.open_group(s), prefix + s + "/", f);
}

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
    if (n.size() == 17 && n.rfind("ckpt_", 0) == 0 && n.substr(14) == ".h5" &&
        std::all_of(n.begin() + 5, n.begin() + 14, [](char c) { return c >= '0' && c <= '9'; }))
      out.emplace_back(std::stoll(n.substr(5, 9)), dir + "/" + n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

void prune_checkpoints(const std::string& dir, const std::string& newest, int keep) {
  std::vector<std::string> complete;
  for (const auto& c : list_checkpoints(dir)) {
    if (c.second == newest) continue;
    try {
      read_checkpoint_info(c.second);
      complete.push_back(c.second);
    } catch (const Error&) {
    }
  }
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep - 1, 0)) < complete.size(); ++i)
    std::remove(complete[i].c_str());
}

void write_meta(const H5Group& m, const CheckpointMeta& cm, int64_t num_optim_states) {
  m.set_attr("step", cm.state.step);
  m.set_attr("epoch", cm.state.epoch);
  m.set_attr("batch_in_epoch", cm.state.batch_in_epoch);
  m.set_attr("seed", cm.state.seed);
  if (cm.state.loss_scale > 0) {
    m.set_attr("loss_scale", cm.state.loss_scale);
    m.set_attr("loss_scale_finite_in_row", cm.state.loss_scale_finite_in_row);
    m.set_attr("skipped_steps", cm.state.skipped_steps);
  }
  m.set_attr("optimizer_step", cm.optimizer_step);
  m.set_attr("optimizer", cm.optimizer);
  m.set_attr("model", cm.model);
  m.set_attr("precision", cm.precision);
  m.set_attr("mesh", cm.mesh.empty() ? std::string("dp=1 tp=1 pp=1") : cm.mesh);
  m.set_attr("config", cm.config_toml);
  m.set_attr("rng", "philox4x32-10, counter-based: (seed, purpose, name, step, sample, element)");
  m.set_attr("num_optim_states", num_optim_states);
  m.set_attr("format_version", static_cast<int64_t>(kCheckpointFormatVersion));
}

int64_t stored_crc(const H5Group& g, const std::string& name) {
  H5Handle ds(SM_H5_CHECK(H5Dopen2(g.id(), name.c_str(), H5P_DEFAULT)), H5Dclose);
  int64_t want = -1;
  if (SM_H5_CHECK(H5Aexists(ds.get(), "crc32")) > 0) {
    H5Handle a(SM_H5_CHECK(H5Aopen(ds.get(), "crc32", H5P_DEFAULT)), H5Aclose);
    H5Handle space(SM_H5_CHECK(H5Aget_space(a.get())), H5Sclose);  // one value, or H5Aread overflows `want`
    if (SM_H5_CHECK(H5Sget_simple_extent_npoints(space.get())) != 1)
      SM_INPUT_ERROR(g.describe(name) << ": the crc32 attribute is not a single value");
    SM_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, &want));
  }
  return want;
}

}  // namespace ckpt
}  // namespace sm
