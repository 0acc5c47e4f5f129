// data_parallel.cpp — bucketed, overlapped gradient all-reduce over the dp comm.
#include "spikemesh/parallel/data_parallel.h"

#include <algorithm>

#include "spikemesh/models/model.h"
#include "spikemesh/parallel/replica_check.h"

namespace sm {

DataParallel::DataParallel(Stage& stage, Comm& dp, double bucket_mb)
    : model_(stage.model()), stage_(stage), dp_(dp) {
  Model& model = model_;
  SM_CHECK(model.finalized(), "data parallel needs a finalised model");
  check_replicas_identical(dp_, params_checksum(stage_.params()), "initial parameters");
  const size_t esize = dtype_size(model.dtype());
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1048576.0 / static_cast<double>(esize)));
  buckets_of_unit_.assign(stage.size(), {});
  Bucket cur;
  auto close = [&] {
    if (cur.numel == 0) return;
    buckets_.push_back(std::move(cur));
    cur = Bucket();
  };
  for (size_t k = stage.size(); k-- > 0;) {  // backward order
    Unit& u = stage.unit(k);
    const int64_t n = u.num_params();
    int64_t at = 0;
    while (at < n) {
      const int64_t take = std::min(n - at, cap - cur.numel);
      cur.segments.push_back({k, at, at + take});
      if (cur.units.empty() || cur.units.back() != k) cur.units.push_back(k);
      cur.numel += take;
      at += take;
      if (cur.numel == cap) close();
    }
  }
  close();
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t k : buckets_[b].units) buckets_of_unit_[k].push_back(b);
  double full = 0;
  for (Param* p : stage_.params()) full += static_cast<double>(p->value.nbytes());
  stats_.param_full_mb = full / 1048576.0;
  stats_.param_peak_mb = stats_.param_full_mb;
}

std::vector<Param*> DataParallel::optimizer_params() { return stage_.params(); }

std::vector<ParamPlacement> DataParallel::placements(bool saving) {
  // Replicated: dp rank 0 writes every parameter; every rank reads it whole.
  const bool holds = !saving || dp_.rank() == 0;
  std::vector<ParamPlacement> out;
  for (Param* p : stage_.params())
    out.push_back(holds ? ParamPlacement{p, flat_range_pieces_of(*p, 0, shape_numel(p->local_shape), 0)}
                        : ParamPlacement{p, {PlacedPiece{p, empty_box(p->shape.size()), 0}}});
  return out;
}

std::vector<int64_t> DataParallel::bucket_sizes() const {
  std::vector<int64_t> out;
  for (auto& b : buckets_) out.push_back(b.numel);
  return out;
}

void DataParallel::begin_step() {
  stage_.zero_grad();
  for (auto& b : buckets_) {
    SM_CHECK(!b.handle, "a gradient bucket is still in flight at the start of a step");
    b.pending = static_cast<int>(b.units.size());
  }
}

void DataParallel::launch(Bucket& b) {
  if (b.segments.size() == 1) {
    const Segment& s = b.segments[0];
    b.buffer = stage_.unit(s.unit).flat_grad().slice0(s.begin, s.end);  // in place
  } else {
    if (!b.buffer.defined() || b.buffer.numel() != b.numel || b.buffer.dtype() != model_.dtype())
      b.buffer = Tensor::empty({b.numel}, model_.dtype(), model_.device());  // [numel]
    int64_t at = 0;
    for (const Segment& s : b.segments) {
      Tensor dst = b.buffer.slice0(at, at + (s.end - s.begin));
      dst.copy_from(stage_.unit(s.unit).flat_grad().slice0(s.begin, s.end));
      at += s.end - s.begin;
    }
  }
  b.handle = dp_.all_reduce_async(b.buffer, ReduceOp::Avg);  // collective over dp
  ++stats_.grad_reductions;
}

void DataParallel::after_backward(size_t unit) {
  if (!last_micro_) return;  // accumulate locally; reduce on the last micro-step only
  for (size_t bi : buckets_of_unit_[unit]) {
    Bucket& b = buckets_[bi];
    SM_CHECK(b.pending > 0, "unit " << unit << " finished backward twice in one step");
    if (--b.pending == 0) launch(b);
  }
  for (auto& b : buckets_)  // let MPI progress the buckets in flight
    if (b.handle) b.handle->test();
}

void DataParallel::end_backward() {
  if (!last_micro_) return;
  for (auto& b : buckets_) {
    SM_CHECK(b.handle || b.pending == 0, "a gradient bucket was never launched (pending " << b.pending << ")");
    if (!b.handle) continue;
    b.handle->wait();
    b.handle.reset();
    if (b.segments.size() > 1) {
      int64_t at = 0;
      for (const Segment& s : b.segments) {
        Tensor dst = stage_.unit(s.unit).flat_grad().slice0(s.begin, s.end);
        dst.copy_from(b.buffer.slice0(at, at + (s.end - s.begin)));
        at += s.end - s.begin;
      }
    } else {
      b.buffer = Tensor();  // drop the view
    }
  }
}

}  // namespace sm
