// bitpack.h — spike tensors stored as bits (8 per byte, LSB first; 1/32 of f32).
// SavedActivation is what a layer keeps of an input for backward: a binary tensor is packed
// into a u8 tensor, anything else is kept by reference (layers never write their inputs).
#pragma once
#include "spikemesh/core/tensor.h"

namespace sm {

// Pack a binary f32/f64 tensor (values exactly 0 or 1) into u8 [ceil(numel/8)].
Tensor pack_bits(const Tensor& binary);
// Unpack into `out` (f32/f64, numel elements) — out must be preallocated.
void unpack_bits(const Tensor& bits, Tensor& out);
// Samples [first, first + count) of packed spikes x [batch, C, H, W] (pack_bits of the whole
// tensor) as floats in a channel-blocked layout [count, C/block, H, W, block] (oneDNN's
// nChw8c / nChw16c) — straight from the bits, no plain copy first. Needs
// channel_blocked_unpack_fits; false, nothing written, else.
bool unpack_bits_channel_blocked(const uint8_t* bits, int64_t first, int64_t count, int64_t C, int64_t HW,
                                 int64_t block, float* out);
// The bits of x[0, n) into out[0, ⌈n/8⌉) by pack_bits' rule, on the calling thread (for kernels
// already inside a parallel region).
// unpack_bits_channel_blocked's condition: block 8 or 16, C % block == 0 and H·W % 8 == 0
// (each plane starts at a byte).
bool channel_blocked_unpack_fits(int64_t C, int64_t HW, int64_t block);
void pack_bits_serial(const float* x, int64_t n, uint8_t* out);
void pack_bits_serial(const double* x, int64_t n, uint8_t* out);

// Spikes as a message (the pipeline's stage boundaries): `spikes` of any floating dtype
// (f32/f64/bf16/f16) on any device, copied to the host and packed into u8 [ceil(numel/8)].
// Returns an undefined tensor when some value is not exactly 0 or 1.
Tensor pack_spikes_on_host(const Tensor& spikes);
// The inverse: a host tensor of `shape` in `dt` (f32/f64/bf16/f16), flagged binary.
Tensor unpack_spikes_on_host(const Tensor& bits, const Shape& shape, DType dt);

class SavedActivation {
 public:
  SavedActivation() = default;
  static SavedActivation save(const Tensor& x);
  // save(x) of a binary x whose pack_bits(x) the caller already made (not repacked).
  static SavedActivation save_packed(const Tensor& x, Tensor bits);
  // The saved tensor (a fresh unpacked copy when it was packed), flagged binary if it was.
  Tensor restore() const;
  // Elements [offset, offset + count) of the flattened saved tensor as a fresh 1-d tensor
  // [count] (unpacked from the bits alone when packed: memopt pieces).
  Tensor restore_range(int64_t offset, int64_t count) const;
  bool packed() const { return packed_; }
  const Tensor& bits() const { return kept_; }  // when packed: u8 [⌈numel/8⌉]
  DType dtype() const { return dtype_; }
  bool defined() const { return kept_.defined(); }
  size_t bytes() const { return kept_.defined() ? kept_.nbytes() : 0; }
  const Shape& shape() const { return shape_; }

 private:
  Tensor kept_;  // packed bits (u8) or the original tensor
  Shape shape_;
  DType dtype_ = DType::F32;
  bool packed_ = false;
};

}  // namespace sm
