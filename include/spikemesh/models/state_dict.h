// state_dict.h — a model's parameters and buffers as an HDF5 "state dict":
//   <group>/params/<name>   full logical shape, the model dtype (f32 or f64)
//   <group>/buffers/<name>  BN running stats in the model dtype; num_batches_tracked as i64 []
//   attributes on <group>: model (name), format = "spikemesh-state-dict", format_version, dtype
// Names are PyTorch state_dict names ("features.0.proj_bn.0.weight"), so
// `{k: f["params"][k][()] for k in f["params"]}` (plus buffers) loads into the equivalent
// torch module. Loading checks every name and shape before it writes anything.
// Sharded parameters are not handled here: checkpoints of sharded state are written and read
// by write_checkpoint / read_checkpoint (io/checkpoint.h) in the same layout.
#pragma once
#include <string>

#include "spikemesh/io/h5file.h"
#include "spikemesh/io/tensor_shard.h"  // kStateDictFormatVersion
#include "spikemesh/models/model.h"

namespace sm {

void save_state_dict(const std::string& path, Model& model);  // creates (truncates) the file
void save_state_dict(const H5Group& group, Model& model);
// strict: entries in the file that the model lacks are an error too (else ignored).
void load_state_dict(const std::string& path, Model& model, bool strict = true);
void load_state_dict(const H5Group& group, Model& model, bool strict = true);

}  // namespace sm
