// init.cpp — weight-initialisation schemes and the layout-independent parameter initialiser.
#include "spikemesh/layers/init.h"

#include <cmath>

#include "spikemesh/core/rng.h"

namespace sm {

WeightInit weight_init_from_name(const std::string& s) {
  if (s == "default" || s == "torch_default") return WeightInit::TorchDefault;
  if (s == "kaiming_normal_fan_out") return WeightInit::KaimingNormalFanOut;
  if (s == "trunc_normal_002") return WeightInit::TruncNormal002;
  if (s == "normal_001") return WeightInit::Normal001;
  SM_INPUT_ERROR("unknown init '" << s
                                  << "' (valid: default, kaiming_normal_fan_out, trunc_normal_002, normal_001)");
}

const char* weight_init_name(WeightInit w) {
  switch (w) {
    case WeightInit::TorchDefault: return "default";
    case WeightInit::KaimingNormalFanOut: return "kaiming_normal_fan_out";
    case WeightInit::TruncNormal002: return "trunc_normal_002";
    case WeightInit::Normal001: return "normal_001";
  }
  return "?";
}

InitSpec weight_init_spec(WeightInit w, int64_t fan_in, int64_t fan_out) {
  switch (w) {
    case WeightInit::TorchDefault: {
      double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));  // kaiming_uniform(a=√5)
      return InitSpec::uniform(-bound, bound);
    }
    case WeightInit::KaimingNormalFanOut:
      return InitSpec::normal(0.0, std::sqrt(2.0 / static_cast<double>(fan_out)));
    case WeightInit::TruncNormal002: return InitSpec::trunc_normal(0.0, 0.02);
    case WeightInit::Normal001: return InitSpec::normal(0.0, 0.01);
  }
  return InitSpec::constant(0.0);
}

InitSpec bias_init_spec(WeightInit w, int64_t fan_in) {
  if (w == WeightInit::TorchDefault) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    return InitSpec::uniform(-bound, bound);
  }
  return InitSpec::constant(0.0);
}

namespace {
// Global (logical) flat index of local element i of a possibly sharded parameter.
int64_t global_index(const Param& p, int64_t i) {
  if (!p.shard.sharded() || p.shard.dim < 0) return i;
  const Shape& g = p.shape;
  const Shape& l = p.local_shape;
  int d = p.shard.dim;
  int64_t inner = 1;
  for (size_t k = d + 1; k < l.size(); ++k) inner *= l[k];
  int64_t outer_idx = i / (inner * l[d]);
  int64_t dim_idx = (i / inner) % l[d];
  int64_t in_idx = i % inner;
  const int64_t seg_len = l[d] / p.shard.segments;  // local rows per block
  const int64_t seg = dim_idx / seg_len, in_seg = dim_idx % seg_len;
  const int64_t gdim = seg * (g[d] / p.shard.segments) + p.shard.index * seg_len + in_seg;
  return (outer_idx * g[d] + gdim) * inner + in_idx;
}

double draw(const InitSpec& s, const CounterRng& rng, int64_t gi) {
  switch (s.kind) {
    case InitSpec::Kind::Constant: return s.a;
    case InitSpec::Kind::Uniform: return s.a + (s.b - s.a) * rng.uniform(gi);
    case InitSpec::Kind::Normal: return s.a + s.b * rng.normal(gi);
    case InitSpec::Kind::TruncNormal:
      for (uint32_t attempt = 0;; ++attempt) {  // redraw on the element's next sub-stream
        double z = rng.normal(gi, attempt);
        if (std::fabs(z) <= 2.0) return s.a + s.b * z;
      }
  }
  return 0.0;
}
}  // namespace

void init_param(Param& p, uint64_t seed) {
  CounterRng rng(seed, "init/" + p.name);
  int64_t n = p.value.numel();
  if (p.value.dtype() == DType::F32) {
    float* v = p.value.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(draw(p.init, rng, global_index(p, i)));
  } else {
    double* v = p.value.data<double>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) v[i] = draw(p.init, rng, global_index(p, i));
  }
}

}  // namespace sm
