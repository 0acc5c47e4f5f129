// flat_shard.cpp — unit shard layouts, rebinding a unit's Params to new flat buffers, shard
// Params for the optimizer, and f32/f64/bf16 element casts.
#include "spikemesh/parallel/flat_shard.h"

#include <cmath>
#include <cstring>

#include "spikemesh/layers/unit.h"
#include "spikemesh/parallel/placement.h"
#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/kernels/cuda/elementwise.h"
#endif

namespace sm {

UnitShardLayout unit_shard_layout(int64_t numel, int rank, int size) {
  SM_CHECK(size >= 1 && rank >= 0 && rank < size, "bad group rank " << rank << " of " << size);
  UnitShardLayout l;
  l.numel = numel;
  l.padded = (numel + size - 1) / size * size;
  l.chunk = l.padded / size;
  l.begin = static_cast<int64_t>(rank) * l.chunk;
  return l;
}

int64_t unit_param_numel(Unit& u) {
  int64_t n = 0;
  for (Param* p : u.params()) n += shape_numel(p->local_shape);
  return n;
}

void bind_unit_flat(Unit& u, const Tensor& flat_value, const Tensor& flat_grad) {
  const int64_t n = unit_param_numel(u);
  SM_CHECK(!flat_value.defined() || flat_value.numel() >= n,
           "unit '" << u.name() << "': value buffer " << flat_value.numel() << " < " << n);
  SM_CHECK(!flat_grad.defined() || flat_grad.numel() >= n,
           "unit '" << u.name() << "': grad buffer " << flat_grad.numel() << " < " << n);
  int64_t off = 0;
  for (Param* p : u.params()) {
    const int64_t k = shape_numel(p->local_shape);
    p->value = flat_value.defined() ? flat_value.slice0(off, off + k).view(p->local_shape) : Tensor();
    p->grad = flat_grad.defined() ? flat_grad.slice0(off, off + k).view(p->local_shape) : Tensor();
    off += k;
  }
  u.flat_value() = flat_value;
  u.flat_grad() = flat_grad;
}

void ShardParams::add_unit(Unit& u, const UnitShardLayout& lay, const Tensor& shard_value,
                           const Tensor& shard_grad) {
  SM_CHECK(shard_value.numel() == lay.chunk && shard_grad.numel() == lay.chunk,
           "unit '" << u.name() << "': shard buffers must hold " << lay.chunk << " elements");
  const std::vector<Param*> ps = u.params();
  const std::vector<FlatPiece> pieces = flat_range_pieces(ps, lay.begin, lay.begin + lay.chunk);
  for (size_t i = 0; i < ps.size(); ++i) {
    Param* p = ps[i];
    const FlatPiece& fp = pieces[i];
    Entry e;
    e.full = p;
    if (fp.count) {
      auto sp = std::make_unique<Param>();
      sp->name = p->name;
      sp->local_name = p->local_name;
      sp->shape = p->shape;
      sp->local_shape = {fp.count};
      // A 1-d flat piece: no dimension is split (dim -1). The group says what it is a piece of
      // (DP, or TPxDP for a tp-sharded parameter); where it sits in the logical tensor — tp
      // box, then the flat range [e.offset, e.offset + e.count) of the tp-local tensor — is
      // placements()' job, from the full Param.
      sp->shard.group = p->shard.sharded() ? ShardSpec::Group::TPxDP : ShardSpec::Group::DP;
      sp->shard.dim = -1;
      sp->init = p->init;
      sp->weight_decay = p->weight_decay;
      sp->value = shard_value.slice0(fp.flat_pos, fp.flat_pos + fp.count);  // [fp.count]
      sp->grad = shard_grad.slice0(fp.flat_pos, fp.flat_pos + fp.count);
      e.shard = sp.get();
      e.offset = fp.offset;
      e.count = fp.count;
      params_.push_back(std::move(sp));
    }
    entries_.push_back(e);
  }
}

void for_each_unit_to_shard(Stage& stage, int rank, int size,
                            const std::function<void(size_t, Unit&, const UnitShardLayout&)>& f) {
  for (size_t k = 0; k < stage.size(); ++k) {
    Unit& u = stage.unit(k);
    const int64_t n = unit_param_numel(u);
    if (n > 0) f(k, u, unit_shard_layout(n, rank, size));
  }
}

bool finish_shard_reduction(std::unique_ptr<CommHandle>& h, Tensor& shard_grad, const Tensor* received) {
  if (!h) return false;
  h->wait();
  h.reset();
  if (received) add_into(shard_grad, *received);
  return true;
}

std::vector<ParamPlacement> ShardParams::placements() const {
  std::vector<ParamPlacement> out;
  for (const Entry& e : entries_) {
    ParamPlacement pl;
    pl.holder = e.shard;
    if (e.shard) pl.pieces = flat_range_pieces_of(*e.full, e.offset, e.offset + e.count, 0);
    else pl.pieces.push_back(PlacedPiece{e.full, empty_box(e.full->shape.size()), 0});
    out.push_back(std::move(pl));
  }
  return out;
}

std::vector<Param*> ShardParams::params() {
  std::vector<Param*> out;
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

namespace {
uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// bf16 of a double: via f32 (f64 -> f32 rounding first; double rounding is acceptable for
// a reduced-precision communication policy and identical on every rank).
double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(t.raw())[i];
    case DType::F64: return static_cast<const double*>(t.raw())[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    default: SM_CHECK(false, "cast: unsupported dtype " << dtype_name(t.dtype()));
  }
  return 0;
}
}  // namespace

void cast_copy(const Tensor& src, Tensor& dst) {
  SM_CHECK(src.numel() == dst.numel(), "cast_copy: " << src.numel() << " vs " << dst.numel() << " elements");
  SM_CHECK(src.device() == dst.device(), "cast_copy from " << src.device().str() << " to " << dst.device().str());
  if (src.device().is_cuda()) {  // the device conversion rounds to nearest even like the host's
    dst.copy_from(src.dtype() == dst.dtype() ? src : src.to_dtype(dst.dtype()));
    return;
  }
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    if (n) std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  switch (dst.dtype()) {
    case DType::F32: {
      float* d = static_cast<float*>(dst.raw());
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(get(src, i));
      break;
    }
    case DType::F64: {
      double* d = static_cast<double*>(dst.raw());
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) d[i] = get(src, i);
      break;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst.raw());
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(static_cast<float>(get(src, i)));
      break;
    }
    default: SM_CHECK(false, "cast_copy: unsupported dtype " << dtype_name(dst.dtype()));
  }
}

void add_into(Tensor& dst, const Tensor& src) {
  SM_CHECK(src.numel() == dst.numel(), "add_into: " << src.numel() << " vs " << dst.numel() << " elements");
  SM_CHECK(src.device() == dst.device(), "add_into from " << src.device().str() << " to " << dst.device().str());
  const int64_t n = src.numel();
  if (dst.device().is_cuda()) {  // f32 master gradients on the GPU (fp64 runs on the CPU only)
#ifdef SPIKEMESH_HAVE_CUDA
    SM_CHECK(dst.dtype() == DType::F32, "add_into on CUDA needs an f32 dst, got " << dtype_name(dst.dtype()));
    const Tensor s32 = src.dtype() == DType::F32 ? src : src.to_dtype(DType::F32);
    cuda::DeviceGuard guard(dst.device().ordinal);
    cuda::add_inplace_cuda<float>(static_cast<float*>(dst.raw()), static_cast<const float*>(s32.raw()), n,
                                  cuda::stream_for(dst.device().ordinal));
#else
    SM_CHECK(false, "add_into on " << dst.device().str() << ": this build has no CUDA support");
#endif
    return;
  }
  if (dst.dtype() == DType::F64) {
    double* d = static_cast<double*>(dst.raw());
    if (src.dtype() == DType::F64) {
      const double* s = static_cast<const double*>(src.raw());
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] += get(src, i);
    }
  } else {
    SM_CHECK(dst.dtype() == DType::F32, "add_into: dst must be f32 or f64");
    float* d = static_cast<float*>(dst.raw());
    if (src.dtype() == DType::F32) {
      const float* s = static_cast<const float*>(src.raw());
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(d[i] + get(src, i));
    }
  }
}

void round_through_bf16(Tensor& t) {
  const int64_t n = t.numel();
  if (t.dtype() == DType::F32) {
    float* d = static_cast<float*>(t.raw());
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(f32_to_bf16(d[i]));
  } else {
    SM_CHECK(t.dtype() == DType::F64, "round_through_bf16: f32 or f64");
    double* d = static_cast<double*>(t.raw());
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(f32_to_bf16(static_cast<float>(d[i])));
  }
}

}  // namespace sm
