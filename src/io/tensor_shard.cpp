// tensor_shard.cpp — dataset paths of the checkpoint format (io/tensor_shard.h).
#include "spikemesh/io/tensor_shard.h"

namespace sm {

std::string param_dataset_path(const std::string& param_name) { return "params/" + param_name; }
std::string buffer_dataset_path(const std::string& buffer_name) { return "buffers/" + buffer_name; }
std::string optim_dataset_path(const std::string& param_name, const std::string& state_name) {
  return "optim/" + param_name + "/" + state_name;
}

}  // namespace sm
