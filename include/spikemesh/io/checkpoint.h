// checkpoint.h — training checkpoints (DESIGN §7), one HDF5 file per step:
//   /params/<name>, /buffers/<name>   the model state dict, full logical shapes
//   /optim/<param name>/<state>       optimizer state (exp_avg, exp_avg_sq, momentum_buffer)
//   /meta  attributes: step, epoch, batch_in_epoch, seed, optimizer_step, model, precision,
//          mesh, config (resolved TOML), rng, format_version, complete (written last)
//   every dataset carries a crc32 attribute, verified on load.
// Atomicity: written as <name>.tmp, flushed and fsynced, renamed, directory fsynced. Older
// complete checkpoints are deleted (beyond --keep) only after the new one is in place, so
// a crash or a full disk at any moment leaves the previous checkpoint loadable.
#pragma once
#include <cstdint>
#include <string>

namespace sm {

class Model;
class Optimizer;

struct TrainState {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epoch of the next batch
  int64_t batch_in_epoch = 0;  // data cursor: index of the next batch within the epoch
  int64_t seed = 0;
};

struct CheckpointInfo {
  std::string path, model, precision, mesh, config_toml;
  TrainState state;
  int64_t optimizer_step = 0;
  int64_t format_version = 0;
  int64_t num_params = 0, num_optim_states = 0;
};

constexpr int kCheckpointFormatVersion = 1;

std::string checkpoint_path(const std::string& dir, int64_t step);  // <dir>/ckpt_<step, 9 digits>.h5
// Writes atomically and prunes to `keep` complete checkpoints; returns the final path.
std::string save_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const TrainState& st,
                            const std::string& config_toml, const std::string& precision, int keep);
// Reads /meta of a complete checkpoint (Input error naming the file otherwise).
CheckpointInfo read_checkpoint_info(const std::string& path);
// Reads every dataset and compares it with its crc32 attribute (Input error naming it).
void verify_checkpoint_checksums(const std::string& path);
// Verifies checksums, the model (name, parameter names and shapes) and loads everything.
CheckpointInfo load_checkpoint(const std::string& path, Model& model, Optimizer& opt);
// Newest complete checkpoint in `dir` whose checksums verify; "" when there is none. Incomplete or
// damaged files are skipped with a warning naming them.
std::string find_latest_checkpoint(const std::string& dir);

}  // namespace sm
