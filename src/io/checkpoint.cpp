// checkpoint.cpp — atomic, checksummed, full-logical-shape checkpoints.
#include "spikemesh/io/checkpoint.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

#include "checkpoint_internal.h"

#include "spikemesh/core/log.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/io/state_dict.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/optimizer.h"

namespace sm {

using ckpt::crc_of;
using ckpt::for_each_dataset;

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
      CheckpointMeta cm = checkpoint_meta_of(model, opt);
      cm.state = st;
      cm.precision = precision;
      cm.mesh = "dp=1 tp=1 pp=1";
      cm.config_toml = config_toml;
      ckpt::write_meta(m, cm, nstate);
      m.set_attr("complete", int64_t(1));  // last: a file without it is never loaded
      f.flush();
      ssize_t size = H5Fget_file_image(f.file_id(), nullptr, 0);
      if (size <= 0) SM_INPUT_ERROR(tmp << ": cannot get the HDF5 file image");
      image.resize(static_cast<size_t>(size));
      if (H5Fget_file_image(f.file_id(), image.data(), image.size()) != size)
        SM_INPUT_ERROR(tmp << ": cannot get the HDF5 file image");
    }
    ckpt::write_file_synced(tmp, image.data(), image.size());
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0) SM_INPUT_ERROR(final_path << ": rename failed");
    ckpt::fsync_path(dir, true);
  } catch (const Error& e) {
    std::remove(tmp.c_str());
    SM_INPUT_ERROR("checkpoint " << final_path << " not written (the previous checkpoint is intact): " << e.what());
  }
  // Prune the oldest complete checkpoints; damaged or incomplete files neither count towards
  // `keep` nor get deleted here (find_latest_checkpoint skips them).
  ckpt::prune_checkpoints(dir, final_path, keep);
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
  return ci;
}

void verify_checkpoint_checksums(const std::string& path) {
  H5File f = H5File::open(path);
  for_each_dataset(f.root(), "", [&](const H5Group& g, const std::string& name, const std::string& rel) {
    Tensor t = g.read(name);
    const int64_t want = ckpt::stored_crc(g, name);
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

CheckpointMeta checkpoint_meta_of(const Model& model, const Optimizer& opt) {
  CheckpointMeta cm;
  cm.model = model.info.name;
  cm.optimizer = opt.config().name;
  cm.optimizer_step = opt.step_count();
  return cm;
}

std::string find_latest_checkpoint(const std::string& dir) {
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

}  // namespace sm
