// bitpack.cpp — pack/unpack of binary activations, one byte (8 elements) per iteration.
#include "spikemesh/core/bitpack.h"

namespace sm {

namespace {
template <typename T>
void pack_impl(const T* x, uint8_t* b, int64_t n) {
  int64_t nbytes = (n + 7) / 8;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < nbytes; ++j) {
    uint8_t v = 0;
    int64_t base = j * 8;
    int lim = static_cast<int>(std::min<int64_t>(8, n - base));
    for (int k = 0; k < lim; ++k) v |= static_cast<uint8_t>(x[base + k] != T(0)) << k;
    b[j] = v;
  }
}
template <typename T>
void unpack_impl(const uint8_t* b, T* x, int64_t n) {
  int64_t nbytes = (n + 7) / 8;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < nbytes; ++j) {
    int64_t base = j * 8;
    int lim = static_cast<int>(std::min<int64_t>(8, n - base));
    for (int k = 0; k < lim; ++k) x[base + k] = static_cast<T>((b[j] >> k) & 1);
  }
}
}  // namespace

Tensor pack_bits(const Tensor& x) {
  Tensor b = Tensor::empty({(x.numel() + 7) / 8}, DType::U8, x.device());
  if (x.dtype() == DType::F32)
    pack_impl(x.data<float>(), b.data<uint8_t>(), x.numel());
  else if (x.dtype() == DType::F64)
    pack_impl(x.data<double>(), b.data<uint8_t>(), x.numel());
  else
    SM_CHECK(false, "pack_bits of " << dtype_name(x.dtype()));
  return b;
}

void unpack_bits(const Tensor& bits, Tensor& out) {
  SM_CHECK(bits.dtype() == DType::U8 && bits.numel() == (out.numel() + 7) / 8, "unpack_bits size mismatch");
  if (out.dtype() == DType::F32)
    unpack_impl(bits.data<uint8_t>(), out.data<float>(), out.numel());
  else if (out.dtype() == DType::F64)
    unpack_impl(bits.data<uint8_t>(), out.data<double>(), out.numel());
  else
    SM_CHECK(false, "unpack_bits into " << dtype_name(out.dtype()));
  out.set_binary(true);
}

SavedActivation SavedActivation::save(const Tensor& x) {
  SavedActivation s;
  s.shape_ = x.shape();
  s.dtype_ = x.dtype();
  if (x.is_binary() && (x.dtype() == DType::F32 || x.dtype() == DType::F64)) {
    s.kept_ = pack_bits(x);
    s.packed_ = true;
  } else {
    s.kept_ = x;
  }
  return s;
}

Tensor SavedActivation::restore() const {
  SM_CHECK(kept_.defined(), "restore of an empty SavedActivation");
  if (!packed_) return kept_;
  Tensor out = Tensor::empty(shape_, dtype_, kept_.device());
  unpack_bits(kept_, out);
  return out;
}

}  // namespace sm
