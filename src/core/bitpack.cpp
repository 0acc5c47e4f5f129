// bitpack.cpp — pack/unpack of binary activations, one byte (8 elements) per iteration, a
// vector compare (pack) or bit test (unpack) per byte. Bit k of byte j is element 8j + k ≠ 0
// (NaN packs as 1, ±0 as 0); the bits past the last element of the last byte are 0.
#include "spikemesh/core/bitpack.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <type_traits>

namespace sm {

namespace {

// Bits of 8 consecutive elements (bit k = x[k] != 0; NaN counts as nonzero, −0 as zero): one
// compare and mask per vector where the build has AVX2, else one element at a time.
inline uint8_t pack8(const float* x) {
#if defined(__AVX2__)
  return static_cast<uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x), _mm256_setzero_ps(), _CMP_NEQ_UQ)));
#else
  uint8_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint8_t>(x[k] != 0.0f) << k;
  return v;
#endif
}
inline uint8_t pack8(const double* x) {
#if defined(__AVX2__)
  const __m256d z = _mm256_setzero_pd();
  const int lo = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(x), z, _CMP_NEQ_UQ));
  const int hi = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(x + 4), z, _CMP_NEQ_UQ));
  return static_cast<uint8_t>(lo | (hi << 4));
#else
  uint8_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint8_t>(x[k] != 0.0) << k;
  return v;
#endif
}

// The 8 elements of byte v (element k = bit k) as 0 or 1.
inline void unpack8(uint8_t v, float* x) {
#if defined(__AVX2__)
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(v), bit), bit);
  _mm256_storeu_ps(x, _mm256_and_ps(_mm256_castsi256_ps(set), _mm256_set1_ps(1.0f)));
#else
  for (int k = 0; k < 8; ++k) x[k] = static_cast<float>((v >> k) & 1);
#endif
}
inline void unpack8(uint8_t v, double* x) {
  for (int k = 0; k < 8; ++k) x[k] = static_cast<double>((v >> k) & 1);
}

// The last partial byte of n elements (the elements after the whole bytes), if any.
template <typename T>
void pack_tail(const T* x, uint8_t* b, int64_t n) {
  const int64_t whole = n / 8;
  if (whole * 8 == n) return;
  uint8_t v = 0;
  for (int64_t k = whole * 8; k < n; ++k) v |= static_cast<uint8_t>(x[k] != T(0)) << (k - whole * 8);
  b[whole] = v;
}

template <typename T>
void pack_impl(const T* x, uint8_t* b, int64_t n) {
  const int64_t whole = n / 8;  // bytes of 8 elements; the last partial byte after them
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < whole; ++j) b[j] = pack8(x + j * 8);
  pack_tail(x, b, n);
}

template <typename T>
void pack_serial(const T* x, uint8_t* b, int64_t n) {
  for (int64_t j = 0; j < n / 8; ++j) b[j] = pack8(x + j * 8);
  pack_tail(x, b, n);
}
template <typename T>
void unpack_impl(const uint8_t* b, T* x, int64_t n) {
  const int64_t whole = n / 8;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < whole; ++j) unpack8(b[j], x + j * 8);
  for (int64_t k = whole * 8; k < n; ++k) x[k] = static_cast<T>((b[whole] >> (k - whole * 8)) & 1);
}
}  // namespace

bool channel_blocked_unpack_fits(int64_t C, int64_t HW, int64_t block) {
  return (block == 8 || block == 16) && C % block == 0 && HW % 8 == 0;
}

bool unpack_bits_channel_blocked(const uint8_t* bits, int64_t first, int64_t count, int64_t C, int64_t HW,
                                 int64_t block, float* out) {
  if (!channel_blocked_unpack_fits(C, HW, block)) return false;
  const int64_t blocks = C / block, plane_bytes = HW / 8;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t n = 0; n < count; ++n)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      const uint8_t* planes = bits + ((first + n) * C + cb * block) * plane_bytes;  // channel c's plane at c·plane_bytes
      float* dst = out + (n * blocks + cb) * HW * block;
      for (int64_t byte = 0; byte < plane_bytes; ++byte) {
        uint8_t column[16];  // bits of pixels 8·byte … 8·byte + 7, one byte per channel
        for (int64_t c = 0; c < block; ++c) column[c] = planes[c * plane_bytes + byte];
        for (int64_t k = 0; k < 8; ++k) {
          float* px = dst + (byte * 8 + k) * block;
          for (int64_t c = 0; c < block; ++c) px[c] = static_cast<float>((column[c] >> k) & 1);
        }
      }
    }
  return true;
}

void pack_bits_serial(const float* x, int64_t n, uint8_t* out) { pack_serial(x, out, n); }
void pack_bits_serial(const double* x, int64_t n, uint8_t* out) { pack_serial(x, out, n); }

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

namespace {
// Every value exactly 0 or 1 (host tensor, f32/f64).
template <typename T>
bool all_binary(const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (p[i] != T(0) && p[i] != T(1)) return false;
  return true;
}
bool is_half(DType dt) { return dt == DType::BF16 || dt == DType::F16; }
}  // namespace

Tensor pack_spikes_on_host(const Tensor& spikes) {
  Tensor h = spikes.to(Device::cpu());
  if (is_half(h.dtype())) h = h.to_dtype(DType::F32);  // 0 and 1 are exact in every float type
  SM_CHECK(h.dtype() == DType::F32 || h.dtype() == DType::F64, "pack_spikes_on_host of " << dtype_name(h.dtype()));
  const bool binary = h.dtype() == DType::F32 ? all_binary(h.data<float>(), h.numel())
                                              : all_binary(h.data<double>(), h.numel());
  return binary ? pack_bits(h) : Tensor();
}

Tensor unpack_spikes_on_host(const Tensor& bits, const Shape& shape, DType dt) {
  SM_CHECK(dt == DType::F32 || dt == DType::F64 || is_half(dt), "unpack_spikes_on_host into " << dtype_name(dt));
  Tensor h = Tensor::empty(shape, is_half(dt) ? DType::F32 : dt);  // [shape] host
  unpack_bits(bits.to(Device::cpu()), h);
  return is_half(dt) ? h.to_dtype(dt).set_binary(true) : h;
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

SavedActivation SavedActivation::save_packed(const Tensor& x, Tensor bits) {
  SM_CHECK(x.is_binary() && bits.dtype() == DType::U8 && bits.numel() == (x.numel() + 7) / 8,
           "save_packed: the bits of another tensor");
  SavedActivation s;
  s.shape_ = x.shape();
  s.dtype_ = x.dtype();
  s.kept_ = std::move(bits);
  s.packed_ = true;
  return s;
}

Tensor SavedActivation::restore() const {
  SM_CHECK(kept_.defined(), "restore of an empty SavedActivation");
  if (!packed_) return kept_;
  Tensor out = Tensor::empty(shape_, dtype_, kept_.device());
  unpack_bits(kept_, out);
  out.set_binary(true);
  return out;
}

Tensor SavedActivation::restore_range(int64_t offset, int64_t count) const {
  SM_CHECK(kept_.defined(), "restore of an empty SavedActivation");
  SM_CHECK(offset >= 0 && count >= 0 && offset + count <= shape_numel(shape_),
           "restore_range [" << offset << ", +" << count << ") of " << shape_str(shape_));
  if (!packed_) {
    Tensor out = Tensor::empty({count}, dtype_, kept_.device());
    out.copy_from(kept_.view({kept_.numel()}).slice0(offset, offset + count));
    return out;
  }
  Tensor out = Tensor::empty({count}, dtype_);
  const uint8_t* b = kept_.data<uint8_t>();
  auto fill = [&](auto* o) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t e = offset + i;
      o[i] = static_cast<std::remove_pointer_t<decltype(o)>>((b[e >> 3] >> (e & 7)) & 1);
    }
  };
  if (dtype_ == DType::F32) fill(out.data<float>());
  else fill(out.data<double>());
  out.set_binary(true);
  return out;
}

}  // namespace sm
