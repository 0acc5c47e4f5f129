// device.h — where a tensor lives. One GPU per rank; CPU is always available and is the
// reference implementation of every kernel.
#pragma once
#include <string>

namespace sm {

struct Device {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  int ordinal = 0;

  static Device cpu() { return Device{}; }
  static Device cuda(int ordinal) { return Device{Kind::CUDA, ordinal}; }
  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && ordinal == o.ordinal; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

// Number of CUDA devices this process can use; 0 in a CPU-only build or with no driver.
int cuda_device_count();
// True when spikemesh was compiled with CUDA support.
bool built_with_cuda();

}  // namespace sm
