// encoder.cpp — layout transposition and static-image encoders.
#include "spikemesh/data/encoder.h"

#include "spikemesh/core/rng.h"

namespace sm {

Encoding encoding_from_name(const std::string& s) {
  if (s == "direct") return Encoding::Direct;
  if (s == "poisson") return Encoding::Poisson;
  SM_INPUT_ERROR("unknown --encoding '" << s << "' (valid: direct, poisson)");
}

const char* encoding_name(Encoding e) { return e == Encoding::Direct ? "direct" : "poisson"; }

namespace {
template <typename T>
void transpose_nt(const float* x, T* y, int64_t N, int64_t Tn, int64_t F) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const float* src = x + (n * Tn + t) * F;
      T* dst = y + (t * N + n) * F;
      for (int64_t f = 0; f < F; ++f) dst[f] = static_cast<T>(src[f]);
    }
}

template <typename T>
void encode(const float* x, T* y, int64_t N, int Tn, int64_t F, Encoding enc, uint64_t seed, int64_t epoch,
            const std::vector<int64_t>& gidx) {
  CounterRng rng(seed, "poisson");
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const float* src = x + n * F;
      T* dst = y + (t * N + n) * F;
      if (enc == Encoding::Direct) {
        for (int64_t f = 0; f < F; ++f) dst[f] = static_cast<T>(src[f]);
      } else {
        for (int64_t f = 0; f < F; ++f) {
          double u = rng.uniform(static_cast<uint64_t>(t * F + f), static_cast<uint32_t>(epoch),
                                 static_cast<uint32_t>(gidx[n]));
          dst[f] = u < src[f] ? T(1) : T(0);
        }
      }
    }
}
}  // namespace

Tensor events_to_time_major(const Tensor& x, DType dt) {
  SM_CHECK(x.dtype() == DType::F32 && x.ndim() >= 2, "events batch must be f32 [N, T, ...]");
  Shape s = x.shape();
  std::swap(s[0], s[1]);
  Tensor y = Tensor::empty(s, dt);
  int64_t F = x.numel() / (x.dim(0) * x.dim(1));
  if (dt == DType::F32)
    transpose_nt(x.data<float>(), y.data<float>(), x.dim(0), x.dim(1), F);
  else
    transpose_nt(x.data<float>(), y.data<double>(), x.dim(0), x.dim(1), F);
  return y;
}

Tensor encode_static(const Tensor& x, int T, Encoding enc, DType dt, uint64_t seed, int64_t epoch,
                     const std::vector<int64_t>& gidx) {
  SM_CHECK(x.dtype() == DType::F32 && x.ndim() >= 1, "static batch must be f32 [N, ...]");
  SM_CHECK(static_cast<int64_t>(gidx.size()) == x.dim(0), "one global index per sample");
  Shape s = x.shape();
  s.insert(s.begin(), T);
  Tensor y = Tensor::empty(s, dt);
  int64_t F = x.numel() / std::max<int64_t>(1, x.dim(0));
  if (dt == DType::F32)
    encode(x.data<float>(), y.data<float>(), x.dim(0), T, F, enc, seed, epoch, gidx);
  else
    encode(x.data<float>(), y.data<double>(), x.dim(0), T, F, enc, seed, epoch, gidx);
  if (enc == Encoding::Poisson) y.set_binary(true);
  return y;
}

}  // namespace sm
