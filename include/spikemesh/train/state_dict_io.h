// state_dict_io.h — a model's state dict in and out of spikemesh (`spikemesh ckpt import`,
// `ckpt export --format`): PyTorch/SpikingJelly names (those the model's parameters and buffers
// carry), files of three kinds in — safetensors (read natively), the flat HDF5 `ckpt export`
// writes, a spikemesh checkpoint's /params and /buffers — and three out: that flat HDF5,
// safetensors (loadable by safetensors.torch.load_file), a NIR graph (train/nir_export.h).
// A PyTorch .pt is refused with the command that converts it (scripts/torch_to_safetensors.py).
// Invariant of an import: nothing is written unless every tensor of the model is found in the
// file with its shape and a fitting dtype and the file holds nothing else; the checkpoint then
// appears under its name complete (written aside, renamed). Local (no MPI call).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/io/safetensors.h"
#include "spikemesh/train/train_config.h"

namespace sm {

class Model;
struct CheckpointModel;

enum class StateDictFormat { H5, Safetensors, Nir };

// --format (h5 | safetensors | nir), or "" for the one `out`'s extension names (.safetensors,
// .nir, else h5). Input error naming --format otherwise.
StateDictFormat state_dict_format(const std::string& flag, const std::string& out);

// Every tensor of a state-dict file (kinds above); `kind` gets "safetensors", "h5 export" or
// "checkpoint". Input error naming the file when it is none of them (a .pt: how to convert it).
NamedTensors read_state_dict_file(const std::string& path, std::string* kind = nullptr);

// Copies `file`'s tensors into the model's parameters and buffers, converting floating dtypes to
// the model's (noted in `notes` when that rounds) — after checking every one: Input error naming
// `origin` and listing the missing, unexpected, misshapen and wrongly typed tensors (a float
// tensor needs F64/F32/F16/BF16, an integer buffer I64/I32) and any NaN/Inf value. Names that all
// start with "module." (DistributedDataParallel) or "_orig_mod." (torch.compile) are taken without it.
void load_state_dict(Model& model, NamedTensors file, const std::string& origin, std::vector<std::string>& notes);

struct ImportSummary {
  std::string model, kind;
  int64_t tensors = 0, elements = 0;
  std::vector<std::string> notes;
};

// `spikemesh ckpt import`: reads `in`, builds cfg's model (finalised on the CPU in cfg's
// precision), loads the state dict into it and writes a step-0 checkpoint `out` recording
// `config_toml` (a fresh optimizer's state; train --init takes its parameters and buffers).
// Input errors: `out` equal to `in`, an unreadable file, a state dict that does not fit.
ImportSummary import_state_dict(const std::string& in, const std::string& out, const TrainConfig& cfg,
                                const std::string& config_toml);

// Writes the loaded model of `cm` (train/checkpoint_tools.h) to `out` in `format`, recording
// `source`; nir_dt: the NIR graph's time step in seconds. Returns a one-line description.
std::string write_state_dict(CheckpointModel& cm, const std::string& out, StateDictFormat format, double nir_dt,
                             const std::string& source);

}  // namespace sm
