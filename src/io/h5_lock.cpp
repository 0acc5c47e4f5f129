// h5_lock.cpp — the process-wide HDF5 mutex.
#include "spikemesh/io/h5_lock.h"

namespace sm {
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace sm
