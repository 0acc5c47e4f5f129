// device_ops.h — the few device-dispatched operations that let a layer write its flow ONCE for
// both devices (pooling, dropout, residual add, the graph composite's ops): activation checks,
// element-wise add and channel-block copies. The CPU branch is the reference; the CUDA branch
// (CUDA builds) enqueues on the tensor's compute stream and matches it exactly (adds round
// once to the storage type; copies are copies).
// Invariants: operands share shape (or element count), dtype and device; results are fresh
// tensors on that device unless the name says in place.
#pragma once
#include <string>

#include "spikemesh/core/tensor.h"

namespace sm::layer_ops {

// x is an activation this build runs on its device: CPU f32/f64, CUDA f32/bf16/f16.
void check_activation(const Tensor& x, const char* what, const std::string& name);

// a + b (same shape, dtype and device), a fresh tensor, not flagged binary.
Tensor add(const Tensor& a, const Tensor& b, const char* what);
// acc += x (same element count, dtype and device).
void add_inplace(Tensor& acc, const Tensor& x, const char* what);

// Channel blocks of [outer, C, inner] tensors: channels [src_c0, src_c0 + count) of src
// (C = src_channels) are copied to channels [dst_c0, dst_c0 + count) of dst (C = dst_channels).
struct ChannelBlock {
  int64_t outer = 1, inner = 1;  // the dims before and after the channel dim
  int64_t count = 0;             // channels copied
};
void copy_channels(const Tensor& src, int64_t src_channels, int64_t src_c0, Tensor& dst, int64_t dst_channels,
                   int64_t dst_c0, const ChannelBlock& b);

}  // namespace sm::layer_ops
