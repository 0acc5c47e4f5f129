// test_gpu_pp_spikes.cpp — spikes as pipeline messages (parallel/pipeline/pp_spikes.h). The reference is
// core/bitpack.h's host packing (pack_spikes_on_host / unpack_spikes_on_host):
//   * on the CPU (runs everywhere): pack_spike_message / unpack_spike_message are exactly it;
//   * on a GPU (tests named *Gpu*, skipped without one): packing on the device gives the same
//     bytes for f32, bf16 and f16 — as a device message and as a host message — for lengths
//     that are and are not multiples of 32 (and 8); host bytes and device bytes unpack on the
//     GPU to the original spikes; a value other than 0 or 1 (0.5, 2, NaN; first or last
//     element) makes both device paths refuse, as the host check does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gpu_test_util.h"
#include "spikemesh/core/bitpack.h"
#include "spikemesh/parallel/pipeline/pp_spikes.h"

namespace sm {
namespace {

const int64_t kLengths[] = {1, 7, 31, 32, 33, 1000, 4099};
const DType kDtypes[] = {DType::F32, DType::BF16, DType::F16};

// The bytes of a u8 tensor on any device, as a host vector.
std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  EXPECT_EQ(h.dtype(), DType::U8);
  const uint8_t* p = static_cast<const uint8_t*>(h.raw());
  return std::vector<uint8_t>(p, p + h.numel());
}

// Host f32 spikes (about 30 % ones) as `dt`.
Tensor spikes(int64_t n, DType dt, uint64_t seed) {
  return gputest::random_input({n}, seed, true).to_dtype(dt).set_binary(true);
}

TEST(PipelinePack, TheHostPathIsCoreBitpack) {
  EXPECT_EQ(spike_message_bytes(0), 0);
  EXPECT_EQ(spike_message_bytes(1), 1);
  EXPECT_EQ(spike_message_bytes(8), 1);
  EXPECT_EQ(spike_message_bytes(9), 2);
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    for (int64_t n : kLengths) {
      const Tensor x = spikes(n, dt, static_cast<uint64_t>(n));
      const Tensor msg = pack_spike_message(x, Device::cpu());
      ASSERT_TRUE(msg.defined());
      EXPECT_EQ(bytes_of(msg), bytes_of(pack_spikes_on_host(x))) << dtype_name(dt) << " n " << n;
      const Tensor back = unpack_spike_message(msg, {n}, dt, Device::cpu());
      EXPECT_TRUE(back.is_binary());
      EXPECT_EQ(gputest::rel_err(back, x), 0.0) << dtype_name(dt) << " n " << n;
    }
  Tensor bad = spikes(33, DType::F32, 5);
  bad.data<float>()[32] = 0.5f;
  EXPECT_FALSE(pack_spike_message(bad, Device::cpu()).defined());
}

TEST(GpuPipelinePack, DevicePackingGivesTheHostBytes) {
  SKIP_WITHOUT_GPU();
  const Device g = gputest::gpu();
  for (DType dt : kDtypes)
    for (int64_t n : kLengths) {
      const Tensor x = spikes(n, dt, 100 + static_cast<uint64_t>(n));  // [n] host
      const std::vector<uint8_t> ref = bytes_of(pack_spikes_on_host(x));
      const Tensor xd = x.to(g);
      const Tensor on_device = pack_spike_message(xd, g);  // direct path: stays on the GPU
      const Tensor on_host = pack_spike_message(xd, Device::cpu());  // staged path: only the bytes cross
      ASSERT_TRUE(on_device.defined() && on_host.defined()) << dtype_name(dt) << " n " << n;
      EXPECT_TRUE(on_device.device().is_cuda());
      EXPECT_TRUE(on_host.device().is_cpu());
      EXPECT_EQ(on_device.numel(), spike_message_bytes(n));
      EXPECT_EQ(on_host.numel(), spike_message_bytes(n));
      EXPECT_EQ(bytes_of(on_device), ref) << dtype_name(dt) << " n " << n;
      EXPECT_EQ(bytes_of(on_host), ref) << dtype_name(dt) << " n " << n;
    }
}

TEST(GpuPipelinePack, DeviceUnpackingRestoresTheSpikes) {
  SKIP_WITHOUT_GPU();
  const Device g = gputest::gpu();
  for (DType dt : kDtypes)
    for (int64_t n : kLengths) {
      const Tensor x = spikes(n, dt, 200 + static_cast<uint64_t>(n));  // [n] host
      const Tensor host_bits = pack_spikes_on_host(x);
      // Host bytes (the staged path) and device bytes (a received device buffer) on the GPU.
      Tensor device_bits = spike_message_buffer(n, g);
      device_bits.copy_from(host_bits);
      for (const Tensor& bits : {host_bits, device_bits}) {
        const Tensor y = unpack_spike_message(bits, {n}, dt, g);
        ASSERT_TRUE(y.device().is_cuda());
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_TRUE(y.is_binary());
        EXPECT_EQ(gputest::rel_err(y, unpack_spikes_on_host(host_bits, {n}, dt)), 0.0)
            << dtype_name(dt) << " n " << n << (bits.device().is_cuda() ? " device bits" : " host bits");
      }
      // A device message unpacks on the host too (a mixed pipeline).
      EXPECT_EQ(gputest::rel_err(unpack_spike_message(pack_spike_message(x.to(g), g), {n}, dt, Device::cpu()), x), 0.0);
    }
}

TEST(GpuPipelinePack, ValuesOtherThanZeroAndOneAreRefused) {
  SKIP_WITHOUT_GPU();
  const Device g = gputest::gpu();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : kDtypes)
    for (float v : {0.5f, 2.0f, -1.0f, nan})
      for (int64_t at : {int64_t{0}, int64_t{1000}}) {  // first and last of 1001 (not a multiple of 32)
        Tensor x = gputest::random_input({1001}, 7, true);
        x.data<float>()[at] = v;
        const Tensor xd = x.to_dtype(dt).to(g);
        EXPECT_FALSE(pack_spikes_on_host(xd).defined());  // the reference agrees
        EXPECT_FALSE(pack_spike_message(xd, g).defined()) << dtype_name(dt) << " value " << v << " at " << at;
        EXPECT_FALSE(pack_spike_message(xd, Device::cpu()).defined()) << dtype_name(dt) << " value " << v << " at " << at;
      }
}

}  // namespace
}  // namespace sm
