// device.h — where a tensor lives. One GPU per rank; CPU is always available and is the
// reference implementation of every kernel.
//
// Streams: every CUDA device has ONE compute stream (created on first use, see
// core/stream_cuda.h) on which spikemesh enqueues all its work for that device — kernels,
// cuDNN/cuBLAS calls, copies. The caching device allocator relies on it: a block freed by
// the host is reused by later work of the same stream, which runs after every earlier use.
// `Stream` is an opaque handle so that this header needs no CUDA header.
#pragma once
#include <cstddef>
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

// An opaque CUDA stream of one device (handle is a cudaStream_t). Default: no stream.
struct Stream {
  void* handle = nullptr;
  int device = -1;  // CUDA ordinal; -1 = none (CPU work)
  bool valid() const { return device >= 0; }
};

// Number of CUDA devices this process can use; 0 in a CPU-only build or with no driver.
int cuda_device_count();
// True when spikemesh was compiled with CUDA support.
bool built_with_cuda();
// Why no CUDA device can be used ("" when cuda_device_count() > 0): "this build has no CUDA
// support", the CUDA runtime's message (e.g. no driver), or "no device is visible".
std::string cuda_unavailable_reason();

// The compute stream of a CUDA device (created on first use); an invalid Stream for a CPU
// device. In a CPU-only build, asking for a CUDA device's stream is an internal error.
Stream compute_stream(const Device& d);
// Blocks the host until all work enqueued on `s` is done (no-op for an invalid stream).
void synchronize(const Stream& s);
// Blocks until the compute stream of `d` is idle (no-op for the CPU).
void synchronize(const Device& d);

// The memory of a GPU in bytes (cudaMemGetInfo's total); 0 for the CPU or when unknown.
size_t device_memory_bytes(const Device& d);

// Makes `d` the calling thread's current CUDA device (no-op for the CPU). Every thread that
// allocates pinned memory or touches a GPU must call it first (e.g. a prefetch thread), or
// the CUDA runtime puts a context on GPU 0 for it.
void make_device_current(const Device& d);

// What `--device` asked for.
enum class DeviceRequest { Cpu, Cuda, Auto };
// "cpu" | "cuda" | "auto"; anything else is an Input error naming --device.
DeviceRequest device_request_from_name(const std::string& name);
const char* device_request_name(DeviceRequest r);

// Picks this rank's device and makes it current. local_rank is the rank within the node
// (MPI_COMM_TYPE_SHARED); with `visible` GPUs rank r uses GPU local_rank % visible.
//  Cpu:  the CPU.
//  Cuda: the GPU; with no usable GPU an Input error "--device cuda: no usable GPU ..." that
//        names the rank, host and the reason.
//  Auto: the GPU when one is visible, else the CPU with a one-line notice.
// Prints one line naming the chosen GPU (rank 0; other ranks with SPIKEMESH_LOG_ALL_RANKS).
Device select_device(DeviceRequest req, int local_rank);

// The GPU that local rank `local_rank` (its index among the ranks of its node) takes when
// `visible` > 0 GPUs are visible to it: cuda:(local_rank % visible). With Slurm's
// --gpus-per-task=1 each task sees one GPU (always cuda:0, a different physical one per task);
// with every GPU visible (mpirun) the ranks of a node take consecutive GPUs. Pure.
Device gpu_for_local_rank(int local_rank, int visible);

}  // namespace sm
