// h5_lock.h — Debian's parallel HDF5 is built without thread safety: every HDF5 call made
// while another thread may also call HDF5 (the prefetch thread reads batches) must hold
// this process-wide mutex.
#pragma once
#include <mutex>

namespace sm {
std::mutex& hdf5_mutex();
}  // namespace sm
