// synthetic_batch.cpp — the synthetic batch of `bench` and `plan` (synthetic_batch.h).
#include "spikemesh/bench/synthetic_batch.h"

#include "spikemesh/core/rng.h"

namespace sm {

std::vector<MicroBatch> synthetic_batch(const ModelInfo& mi, const SyntheticBatch& b, DType dtype, Device dev,
                                        DType activations) {
  const int T = mi.T, dp_rank = b.dp_rank, M = b.microbatches;
  const int64_t N = b.samples, n = N / M;
  int64_t per = 1;
  for (int64_t d : mi.input_shape) per *= d;
  CounterRng rx(b.seed, "bench/x"), ry(b.seed, "bench/y");
  const bool repeated = mi.input_kind == "static";  // one frame repeated over T, as the static encoder feeds it
  std::vector<MicroBatch> micro;
  for (int k = 0; k < M; ++k) {
    Shape xs = {T, n};
    xs.insert(xs.end(), mi.input_shape.begin(), mi.input_shape.end());
    Tensor x = Tensor::empty(xs, dtype), y = Tensor::empty({n}, DType::I64);  // [T, n, ...], [n]
    for (int t = 0; t < T; ++t)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < per; ++e) {
          const int64_t whole = ((repeated ? 0 : t) * N + k * n + i) * per + e;  // index in the [T, N, ...] batch
          const double v = rx.normal(static_cast<uint64_t>(dp_rank) * static_cast<uint64_t>(T * N * per) + whole);
          const int64_t at = (t * n + i) * per + e;
          if (dtype == DType::F32) x.data<float>()[at] = static_cast<float>(v);
          else x.data<double>()[at] = v;
        }
    for (int64_t i = 0; i < n; ++i)
      y.data<int64_t>()[i] =
          static_cast<int64_t>(ry.uniform(dp_rank * N + k * n + i) * mi.num_classes) % mi.num_classes;
    if (dev.is_cuda()) {
      x = x.to(dev).to_dtype(activations);  // [T, n, ...] in the activation dtype
      y = y.to(dev);
    }
    micro.push_back(MicroBatch{x, y, dp_rank * N + k * n, Tensor()});
  }
  return micro;
}

}  // namespace sm
