// multi_tensor.cpp — chunk tables and per-step optimizer scalars (kernels/multi_tensor.h).
#include "spikemesh/kernels/multi_tensor.h"

#include <climits>
#include <cmath>

#include "spikemesh/core/error.h"

namespace sm {

std::vector<TensorChunk> build_chunk_table(const std::vector<int64_t>& sizes, int64_t chunk) {
  SM_CHECK(chunk >= 1, "build_chunk_table: chunk " << chunk << " (must be >= 1)");
  SM_CHECK(sizes.size() <= static_cast<size_t>(INT32_MAX), "build_chunk_table: too many tensors");
  int64_t total = 0;
  for (const int64_t n : sizes) {
    SM_CHECK(n >= 0, "build_chunk_table: negative tensor size " << n);
    total += (n + chunk - 1) / chunk;
  }
  SM_CHECK(total <= INT32_MAX, "build_chunk_table: " << total << " chunks do not fit one launch");
  std::vector<TensorChunk> table;
  table.reserve(static_cast<size_t>(total));
  for (size_t k = 0; k < sizes.size(); ++k)
    for (int64_t begin = 0; begin < sizes[k]; begin += chunk) {
      TensorChunk c;
      c.tensor = static_cast<int32_t>(k);
      c.begin = begin;
      table.push_back(c);
    }
  return table;
}

std::vector<int64_t> chunk_starts(const std::vector<TensorChunk>& table, int64_t count) {
  SM_CHECK(count >= 0, "chunk_starts: negative count");
  for (size_t j = 0; j < table.size(); ++j)
    SM_CHECK(table[j].tensor >= 0 && table[j].tensor < count && (j == 0 || table[j - 1].tensor <= table[j].tensor),
             "chunk_starts: chunk " << j << " names tensor " << table[j].tensor << " (tables list tensors 0.."
                                    << count - 1 << " in order)");
  std::vector<int64_t> starts(static_cast<size_t>(count) + 1);
  size_t j = 0;
  for (int64_t k = 0; k < count; ++k) {
    while (j < table.size() && table[j].tensor < k) ++j;
    starts[static_cast<size_t>(k)] = static_cast<int64_t>(j);
  }
  starts[static_cast<size_t>(count)] = static_cast<int64_t>(table.size());
  return starts;
}

OptimStepScalars sgd_step_scalars(double lr) {
  OptimStepScalars s;
  s.lr = lr;
  return s;
}

OptimStepScalars adam_step_scalars(double lr, double beta1, double beta2, double weight_decay, bool decoupled,
                                   int64_t t) {
  SM_CHECK(t >= 1, "adam step " << t << " (must count from 1)");
  OptimStepScalars s;
  const double td = static_cast<double>(t);
  // adam.cpp's expressions: bias_corr1 = 1 - β1^t, step_size = lr / bias_corr1, ...
  const double bias_corr1 = 1.0 - std::pow(beta1, td);
  const double bias_corr2 = 1.0 - std::pow(beta2, td);
  s.lr = lr;
  s.step_size = lr / bias_corr1;
  s.bias_corr2_sqrt = std::sqrt(bias_corr2);
  s.decay_factor = decoupled ? 1.0 - lr * weight_decay : 1.0;
  return s;
}

}  // namespace sm
