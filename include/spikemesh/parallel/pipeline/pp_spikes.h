// pp_spikes.h — spikes as pipeline messages (pp_runtime.h): the bytes that carry a {0,1}
// activation between stages, produced and consumed where the activation lives.
//
// Wire format (the same on every path, so a host-packed message can be unpacked on a GPU and
// the other way round): ceil(n/8) bytes, element e is bit e % 8 of byte e / 8 (LSB first) —
// core/bitpack.h's pack_spikes_on_host, the reference implementation. On a GPU the packing is
// kernels/cuda/bitpack.h's (u32 words LSB first: on a little-endian machine their first
// ceil(n/8) bytes are exactly those bytes) with the 0/1 check done by the same kernel (one
// device flag, read back once per message). Device buffers hold whole u32 words (the kernels
// read and write words); messages are views of their first ceil(n/8) bytes.
#pragma once
#include <cstdint>

#include "spikemesh/core/tensor.h"

namespace sm {

// ceil(n / 8): the bytes of a message of n spikes.
int64_t spike_message_bytes(int64_t n);

// `spikes` (f32/f64/bf16/f16 on the CPU; f32/bf16/f16 on a GPU) as message bytes, u8
// [spike_message_bytes(numel)] on `where` (the CPU, or the spikes' GPU). A GPU tensor is packed
// on the device; for a host message only the packed bytes cross to the host (one copy, with the
// flag). Returns an undefined tensor when some value is not exactly 0 or 1 (NaN included).
// Host spikes with a GPU `where` are an internal error (the runtime never asks for it).
Tensor pack_spike_message(const Tensor& spikes, Device where);

// A buffer that receives a message of n spikes on `dev`: u8 [spike_message_bytes(n)]; on a GPU a
// view of whole u32 words (what unpack_spike_message reads); on the CPU pinned when `pinned`.
Tensor spike_message_buffer(int64_t n, Device dev, bool pinned = false);

// The inverse of pack_spike_message: `bits` (u8 [spike_message_bytes(numel(shape))] on the host,
// or a spike_message_buffer on a GPU) as a tensor of `shape` in `dt` on `dev`, flagged binary.
// Host bits for a GPU `dev` cross as bytes and are unpacked there.
Tensor unpack_spike_message(const Tensor& bits, const Shape& shape, DType dt, Device dev);

}  // namespace sm
