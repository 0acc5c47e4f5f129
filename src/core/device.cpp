// device.cpp — device naming; CUDA probing lives in device_cuda.cu when built with CUDA.
#include "spikemesh/core/device.h"

namespace sm {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(ordinal); }

#ifndef SPIKEMESH_HAVE_CUDA
int cuda_device_count() { return 0; }
bool built_with_cuda() { return false; }
#endif

}  // namespace sm
