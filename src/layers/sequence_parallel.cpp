// sequence_parallel.cpp — the row (sample) shards of layers/sequence_parallel.h: per time step,
// the [N, ...] block's sample shards are contiguous chunks, so the collectives need no packing.
#include "spikemesh/layers/sequence_parallel.h"

#include "spikemesh/core/error.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/ctx.h"

namespace sm {

void SpRegion::set_sharded(int slot, bool s) {
  SM_CHECK(slot >= 0, "sequence parallel: slot " << slot);
  if (slot >= static_cast<int>(sharded_.size())) sharded_.resize(static_cast<size_t>(slot) + 1, 0);
  sharded_[static_cast<size_t>(slot)] = s ? 1 : 0;
}

SpStatsScope::SpStatsScope(const SpLink& link, Ctx& ctx) : ctx_(ctx), saved_(ctx.bn_sync) {
  if (link.member_sharded(ctx.slot)) {
    SM_CHECK(!ctx.bn_sync, "sequence parallel: a sharded region under synced batch norm over another group");
    ctx.bn_sync = ctx.tp;
  }
}
SpStatsScope::~SpStatsScope() { ctx_.bn_sync = saved_; }

namespace {

struct Rows {
  int64_t T = 0, N = 0, per_sample = 0;
};

Rows rows_of(const Tensor& x) {
  SM_CHECK(x.ndim() >= 2, "sequence parallel: activation " << shape_str(x.shape()) << " is not [T, N, ...]");
  Rows r;
  r.T = x.dim(0);
  r.N = x.dim(1);
  r.per_sample = r.T * r.N > 0 ? x.numel() / (r.T * r.N) : 0;
  return r;
}

Shape with_samples(const Shape& s, int64_t n) {
  Shape out = s;
  out[1] = n;
  return out;
}

}  // namespace

Tensor sp_step(const Tensor& x, int64_t t) {
  const Rows r = rows_of(x);
  SM_CHECK(t >= 0 && t < r.T, "sequence parallel: step " << t << " of " << r.T);
  Shape one = x.shape();
  one[0] = 1;
  Tensor v = x.view({r.T, r.N * r.per_sample}).slice0(t, t + 1).view(one);
  v.set_binary(x.is_binary());
  return v;
}

Tensor sp_rows_of(const Tensor& x, int rank, int tp) {
  const Rows r = rows_of(x);
  SM_CHECK(tp >= 1 && r.N % tp == 0 && rank >= 0 && rank < tp,
           "sequence parallel: " << r.N << " samples over tp " << tp << " (rank " << rank << ")");
  const int64_t n = r.N / tp, row = n * r.per_sample;
  Tensor out = Tensor::empty(with_samples(x.shape(), n), x.dtype(), x.device());  // [T, N/tp, ...]
  const Tensor whole = x.view({r.T * tp, row});
  const Tensor mine = out.view({r.T, row});
  for (int64_t t = 0; t < r.T; ++t) mine.slice0(t, t + 1).copy_from(whole.slice0(t * tp + rank, t * tp + rank + 1));
  out.set_binary(x.is_binary());
  return out;
}

// One collective per time step: step t's [N, ...] block is contiguous and its sample shards
// are contiguous chunks of it, so nothing is packed (no whole-sized scratch next to y).
Tensor sp_reduce_scatter_rows(const Tensor& x, Collectives& tp) {
  const Rows r = rows_of(x);
  const int p = tp.size();
  SM_CHECK(r.N % p == 0, "sequence parallel: " << r.N << " samples do not divide by tp " << p);
  const int64_t whole = r.N * r.per_sample, part = whole / p;
  Tensor out = Tensor::empty(with_samples(x.shape(), r.N / p), x.dtype(), x.device());  // [T, N/tp, ...]
  const Tensor in_steps = x.view({r.T, whole}), out_steps = out.view({r.T, part});
  for (int64_t t = 0; t < r.T; ++t) {
    Tensor o = out_steps.slice0(t, t + 1).view({part});
    tp.reduce_scatter_sum(in_steps.slice0(t, t + 1).view({whole}), o);
  }
  return out;
}

Tensor sp_all_gather_rows(const Tensor& x, Collectives& tp) {
  const Rows r = rows_of(x);
  const int p = tp.size();
  const int64_t part = r.N * r.per_sample, whole = part * p;
  Tensor out = Tensor::empty(with_samples(x.shape(), r.N * p), x.dtype(), x.device());  // [T, tp·n, ...]
  const Tensor in_steps = x.view({r.T, part}), out_steps = out.view({r.T, whole});
  for (int64_t t = 0; t < r.T; ++t) {
    Tensor o = out_steps.slice0(t, t + 1).view({whole});
    tp.all_gather(in_steps.slice0(t, t + 1).view({part}), o);
  }
  out.set_binary(x.is_binary());
  return out;
}

}  // namespace sm
