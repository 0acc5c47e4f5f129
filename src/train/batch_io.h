// batch_io.h — the trainer's batches: read and encode samples of an HDF5 split into the
// model's time-major input, optionally in pinned host memory, and move a host micro-batch to
// the model's device. Internal to src/train (the trainer and its prefetch thread).
// Invariants: load_micro reads independently (safe on the prefetch thread, which must have
// made the rank's GPU current first); to_device enqueues on the device's compute stream and
// copies asynchronously only from pinned memory.
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/data/augment.h"
#include "spikemesh/data/encoder.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/train/train_step.h"

namespace sm {

// Encodes raw samples `idx` of a split into the model's input layout: x [T, n, ...].
Tensor encode(const H5Dataset& ds, const Tensor& raw, const std::vector<int64_t>& idx, int T, Encoding enc, DType dt,
              uint64_t seed, int64_t epoch);

// Reads, augments (`augment`, training samples only: data/augment.h; its soft targets go into
// the batch's `target`) and encodes samples `idx`; with `pinned` the batch lands in
// page-locked memory.
MicroBatch load_micro(const H5Dataset& ds, Split split, const std::vector<int64_t>& idx, int T, Encoding enc,
                      DType dt, uint64_t seed, int64_t epoch, bool pinned = false, const Augmenter* augment = nullptr);

// `b` in page-locked host memory (so that its copy to a GPU is asynchronous).
MicroBatch pinned_copy(const MicroBatch& b);

// A host micro-batch on `dev`: x in the activation dtype `act`, y [n] i64 (no-op on the CPU).
MicroBatch to_device(const MicroBatch& b, const Device& dev, DType act);

}  // namespace sm
