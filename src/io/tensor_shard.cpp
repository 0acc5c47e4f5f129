// tensor_shard.cpp — dataset paths of the checkpoint format and the conversion of flat-buffer
// chunks (ZeRO/FSDP shards) and replicated state into TensorShards.
#include "spikemesh/io/tensor_shard.h"

#include <algorithm>

#include "spikemesh/models/model.h"
#include "spikemesh/train/optimizer.h"

namespace sm {

std::string param_dataset_path(const std::string& param_name) { return "params/" + param_name; }
std::string buffer_dataset_path(const std::string& buffer_name) { return "buffers/" + buffer_name; }
std::string optim_dataset_path(const std::string& param_name, const std::string& state_name) {
  return "optim/" + param_name + "/" + state_name;
}

std::vector<FlatPiece> flat_range_pieces(const std::vector<const Param*>& params, int64_t begin, int64_t end) {
  SM_CHECK(0 <= begin && begin <= end, "flat range [" << begin << ", " << end << ")");
  std::vector<FlatPiece> out;
  out.reserve(params.size());
  int64_t start = 0;  // first flat element of the current parameter
  for (const Param* p : params) {
    SM_CHECK(p->local_shape == p->shape,
             "parameter '" << p->name << "' is tensor-parallel sharded (" << shape_str(p->local_shape) << " of "
                           << shape_str(p->shape) << "): its flat range is not a range of the logical tensor");
    const int64_t n = shape_numel(p->shape);
    const int64_t lo = std::max(begin, start), hi = std::min(end, start + n);
    FlatPiece fp;
    if (lo < hi) {
      fp.offset = lo - start;
      fp.count = hi - lo;
      fp.flat_pos = lo - begin;
    }
    out.push_back(fp);
    start += n;
  }
  return out;
}

std::vector<FlatPiece> flat_range_pieces(const std::vector<Param*>& params, int64_t begin, int64_t end) {
  return flat_range_pieces(std::vector<const Param*>(params.begin(), params.end()), begin, end);
}

void append_flat_shards(std::vector<TensorShard>& out, const std::vector<Param*>& params, int64_t begin,
                        int64_t end, const Tensor& shard, const std::string& state_name) {
  const std::vector<FlatPiece> pieces = flat_range_pieces(params, begin, end);
  int64_t used = 0;  // elements of `shard` that belong to some parameter
  for (const FlatPiece& fp : pieces)
    if (fp.count) used = std::max(used, fp.flat_pos + fp.count);
  SM_CHECK(used == 0 || (shard.defined() && shard.numel() >= used),
           "flat shard [" << begin << ", " << end << ") needs " << used << " elements, the tensor holds "
                          << (shard.defined() ? shard.numel() : 0));
  const Tensor flat = used ? shard.view({shard.numel()}) : Tensor();
  for (size_t i = 0; i < params.size(); ++i) {
    const Param* p = params[i];
    TensorShard s;
    s.path = state_name.empty() ? param_dataset_path(p->name) : optim_dataset_path(p->name, state_name);
    s.shape = p->shape;
    s.dtype = shard.defined() ? shard.dtype() : p->value.dtype();
    s.offset = pieces[i].offset;
    s.count = pieces[i].count;
    if (s.count) s.data = flat.slice0(pieces[i].flat_pos, pieces[i].flat_pos + s.count);
    out.push_back(std::move(s));
  }
}

namespace {
TensorShard whole(const std::string& path, const Shape& shape, Tensor& value, bool holds) {
  TensorShard s;
  s.path = path;
  s.shape = shape;
  s.dtype = value.dtype();
  s.offset = 0;
  s.count = holds ? shape_numel(shape) : 0;
  if (holds) s.data = value;
  return s;
}
}  // namespace

std::vector<TensorShard> buffer_shards(Model& model, bool holds) {
  std::vector<TensorShard> out;
  for (Buffer* b : model.buffers()) out.push_back(whole(buffer_dataset_path(b->name), b->shape, b->value, holds));
  return out;
}

std::vector<TensorShard> replicated_state_shards(Model& model, Optimizer* opt, bool holds) {
  SM_CHECK(model.finalized(), "state of model '" << model.info.name << "' before finalize()");
  std::vector<TensorShard> out;
  for (Param* p : model.params()) {
    SM_CHECK(!p->shard.sharded() && p->local_shape == p->shape,
             "replicated_state_shards: parameter '" << p->name << "' is sharded (use append_flat_shards)");
    out.push_back(whole(param_dataset_path(p->name), p->shape, p->value, holds));
  }
  for (TensorShard& s : buffer_shards(model, holds)) out.push_back(std::move(s));
  if (opt) {
    std::vector<Param*>& ps = opt->params();
    for (const OptimState& st : opt->state()) {
      auto it = std::find_if(ps.begin(), ps.end(), [&](const Param* p) { return p->name == st.param_name; });
      Shape shape = it != ps.end() ? (*it)->shape : st.value->shape();
      out.push_back(whole(optim_dataset_path(st.param_name, st.state_name), shape, *st.value, holds));
    }
  }
  return out;
}

}  // namespace sm
