// init.h — weight initialisation schemes a spec can name, mapped to InitSpecs given fans.
#pragma once
#include <string>

#include "spikemesh/layers/param.h"

namespace sm {

enum class WeightInit {
  TorchDefault,          // PyTorch default: weight U(±1/sqrt(fan_in)) [kaiming_uniform a=√5], bias U(±1/sqrt(fan_in))
  KaimingNormalFanOut,   // N(0, sqrt(2 / fan_out)) (relu gain), bias 0
  TruncNormal002,        // trunc-normal std 0.02, bias 0 (Spikformer)
  Normal001,             // N(0, 0.01), bias 0 (torchvision VGG classifier)
};

WeightInit weight_init_from_name(const std::string& s);  // throws Input on unknown names
const char* weight_init_name(WeightInit w);
InitSpec weight_init_spec(WeightInit w, int64_t fan_in, int64_t fan_out);
InitSpec bias_init_spec(WeightInit w, int64_t fan_in);

}  // namespace sm
