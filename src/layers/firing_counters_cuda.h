// firing_counters_cuda.h — the CUDA neurons' firing counters, kept together so a report reads
// them all with one device-to-host copy per device instead of one synchronisation per layer.
// Each CUDA neuron owns one int64 slot of a per-device pool of pages (device tensors of
// kPageSlots counters; a slot is a [1] view into a page). A forward that writes its counter
// marks the pool stale; a read of a stale pool, or of a slot already read since the last
// refresh (the next report: a replayed CUDA graph writes counters without telling the host),
// copies every page to a host mirror (one copy per page, synchronous); the other reads of the
// same report take the mirror. The values are the counters' exact integers, so reported
// firing rates are unchanged. Thread-safe.
#pragma once
#ifdef SPIKEMESH_HAVE_CUDA
#include <cstdint>

#include "spikemesh/core/tensor.h"

namespace sm {

constexpr int64_t kPageSlots = 256;

// A fresh counter slot on dev (I64 [1], a view into the pool; value unspecified).
Tensor firing_counter_slot(Device dev);
// A counter of dev's pool was (or will be, in stream order) written: the mirror is stale.
void firing_counters_written(Device dev);
// The value of `counter` when it is a pool slot (refreshing the mirror if stale); false
// (value untouched) for any other tensor.
bool firing_counter_read(const Tensor& counter, int64_t& value);

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
