// batch_io.cpp — the trainer's batches (batch_io.h): HDF5 samples -> encoded, optionally
// pinned, host micro-batches -> the model's device.
#include "batch_io.h"

namespace sm {

// Encodes raw samples `idx` of a split into the model's input layout.
Tensor encode(const H5Dataset& ds, const Tensor& raw, const std::vector<int64_t>& idx, int T, Encoding enc, DType dt,
              uint64_t seed, int64_t epoch) {
  if (ds.info().is_events()) return events_to_time_major(raw, dt);
  return encode_static(raw, T, enc, dt, seed, epoch, idx);
}

// Reads (independently: safe on the prefetch thread) and encodes samples `idx`. For a GPU
// run (`pinned`) the batch lands in page-locked memory, so that its copy to the device is
// asynchronous.
MicroBatch load_micro(const H5Dataset& ds, Split split, const std::vector<int64_t>& idx, int T, Encoding enc,
                      DType dt, uint64_t seed, int64_t epoch, bool pinned, const Augmenter* augment) {
  MicroBatch b;
  Tensor raw;
  ds.read(split, idx, raw, b.y);
  if (augment && !idx.empty()) b.target = augment_batch(*augment, ds, split, raw, idx, b.y, epoch);
  b.x = encode(ds, raw, idx, T, enc, dt, seed, epoch);
  return pinned ? pinned_copy(b) : b;
}

MicroBatch pinned_copy(const MicroBatch& b) {
  MicroBatch p = b;
  Tensor px = Tensor::empty_pinned(b.x.shape(), b.x.dtype()), py = Tensor::empty_pinned(b.y.shape(), b.y.dtype());
  px.copy_from(b.x);
  py.copy_from(b.y);
  p.x = px.set_binary(b.x.is_binary());  // Poisson spikes stay marked: saved as bits on the device
  p.y = py;
  return p;
}

// A host micro-batch on the model's device: x [T, n, ...] in the activation dtype, y [n] i64.
// Enqueued on the device's compute stream (asynchronous from pinned memory); a no-op on the CPU.
MicroBatch to_device(const MicroBatch& b, const Device& dev, DType act) {
  if (dev.is_cpu()) return b;
  MicroBatch d;
  const Stream s = compute_stream(dev);
  // Asynchronous only from pinned memory (which the allocator keeps until the copy is done);
  // a pageable source may be freed on return, so it is copied synchronously.
  d.x = b.x.is_pinned() ? b.x.to(dev, s) : b.x.to(dev);
  if (d.x.dtype() != act) d.x = d.x.to_dtype(act).set_binary(b.x.is_binary());
  d.y = b.y.is_pinned() ? b.y.to(dev, s) : b.y.to(dev);
  d.sample_offset = b.sample_offset;
  d.target = b.target;  // the loss reads soft targets on the host
  return d;
}

}  // namespace sm
