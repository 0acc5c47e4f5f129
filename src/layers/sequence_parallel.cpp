// sequence_parallel.cpp — the row (sample) shards of layers/sequence_parallel.h: packing
// [T, N, ...] into tp contiguous blocks of [T, N/tp, ...] and back, around the collectives.
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

// blocks[b] [T, n·per_sample] <- x's samples [b·n, (b+1)·n) of every step, b < parts; dst is
// [parts, T, n·per_sample] contiguous (pack) — or the reverse (unpack).
void pack(const Tensor& x, Tensor& dst, int parts, bool unpack) {
  const Rows r = rows_of(unpack ? dst : x);
  const int64_t n = r.N / parts, row = n * r.per_sample;
  const Tensor whole = (unpack ? dst : x).view({r.T * parts, row});   // row t·parts + b
  const Tensor blocks = (unpack ? x : dst).view({parts * r.T, row});  // row b·T + t
  for (int64_t t = 0; t < r.T; ++t)
    for (int b = 0; b < parts; ++b) {
      Tensor w = whole.slice0(t * parts + b, t * parts + b + 1);
      Tensor k = blocks.slice0(b * r.T + t, b * r.T + t + 1);
      if (unpack) w.copy_from(k);
      else k.copy_from(w);
    }
}

}  // namespace

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

Tensor sp_reduce_scatter_rows(const Tensor& x, Collectives& tp) {
  const Rows r = rows_of(x);
  const int p = tp.size();
  SM_CHECK(r.N % p == 0, "sequence parallel: " << r.N << " samples do not divide by tp " << p);
  Tensor packed = Tensor::empty({x.numel()}, x.dtype(), x.device());  // [tp, T, N/tp, ...]
  pack(x, packed, p, false);
  Tensor out = Tensor::empty(with_samples(x.shape(), r.N / p), x.dtype(), x.device());  // [T, N/tp, ...]
  Tensor flat = out.view({out.numel()});
  tp.reduce_scatter_sum(packed, flat);
  return out;
}

Tensor sp_all_gather_rows(const Tensor& x, Collectives& tp) {
  const Rows r = rows_of(x);
  const int p = tp.size();
  Tensor gathered = Tensor::empty({x.numel() * p}, x.dtype(), x.device());  // [tp, T, n, ...]
  tp.all_gather(x.view({x.numel()}), gathered);
  Tensor out = Tensor::empty(with_samples(x.shape(), r.N * p), x.dtype(), x.device());  // [T, tp·n, ...]
  pack(gathered, out, p, true);
  out.set_binary(x.is_binary());
  return out;
}

}  // namespace sm
