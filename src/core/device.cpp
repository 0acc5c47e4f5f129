// device.cpp — device naming, the --device request and the per-rank device choice.
// CUDA probing lives in device_cuda.cu, streams in stream_cuda.cpp (CUDA builds only); a
// CPU-only build gets the stubs at the bottom.
#include "spikemesh/core/device.h"

#include "spikemesh/core/enum_names.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/stream_cuda.h"
#endif

namespace sm {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(ordinal); }

void make_device_current(const Device& d) {
  if (d.is_cpu()) return;
#ifdef SPIKEMESH_HAVE_CUDA
  cuda::set_current_device(d.ordinal);
#else
  SM_CHECK(false, "make " << d.str() << " current: this build has no CUDA support");
#endif
}

namespace {
const EnumName<DeviceRequest> kDeviceRequestNames[] = {
    {"cpu", DeviceRequest::Cpu}, {"cuda", DeviceRequest::Cuda}, {"gpu", DeviceRequest::Cuda},
    {"auto", DeviceRequest::Auto}};
}  // namespace

DeviceRequest device_request_from_name(const std::string& name) {
  if (auto r = enum_from_name(kDeviceRequestNames, ascii_lower(name))) return *r;
  SM_INPUT_ERROR("--device " << name << ": unknown device (valid: cpu, cuda, auto)");
}

const char* device_request_name(DeviceRequest r) { return enum_name(kDeviceRequestNames, r); }

Device select_device(DeviceRequest req, int local_rank) {
  if (req == DeviceRequest::Cpu) return Device::cpu();
  const int visible = cuda_device_count();
  if (visible == 0) {
    if (req == DeviceRequest::Cuda)
      SM_INPUT_ERROR("--device cuda: no usable GPU (" << where_am_i() << ": " << cuda_unavailable_reason()
                                                      << "); use --device cpu or --device auto");
    SM_INFO("--device auto: no usable GPU (" << cuda_unavailable_reason() << "); running on the CPU");
    return Device::cpu();
  }
  const Device d = gpu_for_local_rank(local_rank, visible);
#ifdef SPIKEMESH_HAVE_CUDA
  cuda::set_current_device(d.ordinal);
  SM_INFO("device: " << d.str() << " (" << cuda::device_description(d.ordinal) << ") for local rank " << local_rank
                     << ", " << visible << " GPU" << (visible > 1 ? "s" : "") << " visible");
#endif
  return d;
}

Device gpu_for_local_rank(int local_rank, int visible) {
  SM_CHECK(local_rank >= 0, "negative local rank " << local_rank);
  SM_CHECK(visible > 0, "no visible GPU to choose from");
  return Device::cuda(local_rank % visible);
}

#ifndef SPIKEMESH_HAVE_CUDA
int cuda_device_count() { return 0; }
bool built_with_cuda() { return false; }
size_t device_memory_bytes(const Device&) { return 0; }
std::string cuda_unavailable_reason() { return "this build has no CUDA support"; }
Stream compute_stream(const Device& d) {
  SM_CHECK(d.is_cpu(), "no stream for " << d.str() << ": this build has no CUDA support");
  return Stream{};
}
void synchronize(const Stream& s) {
  SM_CHECK(!s.valid(), "synchronize of a CUDA stream in a build without CUDA");
}
void synchronize(const Device& d) {
  SM_CHECK(d.is_cpu(), "synchronize " << d.str() << " in a build without CUDA");
}
#endif

}  // namespace sm
