// encoder.h — turning a batch as stored ([N, T, C, H, W] events or [N, C, H, W] static
// images) into the model's time-major input [T, N, C, H, W]. Poisson spikes are drawn from
// CounterRng(seed, "poisson") keyed by (epoch, global sample index, element): the same for
// a sample whatever rank or batch position it lands on.
#pragma once
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

enum class Encoding { Direct, Poisson };
Encoding encoding_from_name(const std::string& s);  // "direct" | "poisson"; throws Input
const char* encoding_name(Encoding e);

// events [N, T, ...] -> [T, N, ...] in dtype dt
Tensor events_to_time_major(const Tensor& x, DType dt);
// static [N, ...] in [0, 1] -> [T, N, ...] (direct: repeated; poisson: Bernoulli(x))
Tensor encode_static(const Tensor& x, int T, Encoding enc, DType dt, uint64_t seed, int64_t epoch,
                     const std::vector<int64_t>& global_indices);

}  // namespace sm
