// checkpoint_plan.cpp — shard lists of the checkpoint writer/reader: local checks, grouping
// by tensor, the cross-rank consistency check, flat runs of box unions and HDF5 box
// selections (checkpoint_internal.h).
#include <algorithm>
#include <map>

#include "checkpoint_internal.h"

namespace sm {
namespace ckpt {

bool is_file_dtype(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::I32 || d == DType::I64 || d == DType::U8;
}
bool is_float(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16; }

namespace {

void check_box(const TensorShard& s) {
  if (s.box.none) return;
  const Box& b = s.box;
  SM_CHECK(b.offset.size() == s.shape.size() && b.count.size() == s.shape.size(),
           "checkpoint tensor '" << s.path << "' of shape " << shape_str(s.shape) << ": box " << b.str() << " of rank "
                                 << b.offset.size() << " (a rank holding nothing passes empty_box(rank))");
  for (size_t i = 0; i < s.shape.size(); ++i)
    SM_CHECK(b.offset[i] >= 0 && b.count[i] >= 0 && b.offset[i] + b.count[i] <= s.shape[i],
             "checkpoint tensor '" << s.path << "': box " << b.str() << " outside its shape " << shape_str(s.shape));
}

}  // namespace

std::vector<TensorPlan> plan_tensors(const std::vector<TensorShard>& shards, bool saving) {
  std::vector<TensorPlan> plans;
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < shards.size(); ++k) {
    const TensorShard& s = shards[k];
    SM_CHECK(!s.path.empty() && s.path[0] != '/' && s.path.rfind("meta", 0) != 0,
             "checkpoint tensor path '" << s.path << "' (relative, not under meta/)");
    SM_CHECK(is_file_dtype(s.dtype), "checkpoint tensor '" << s.path << "': dtype " << dtype_name(s.dtype));
    SM_CHECK(s.shape.size() <= static_cast<size_t>(kMaxDims), "checkpoint tensor '" << s.path << "' rank");
    for (int64_t d : s.shape) SM_CHECK(d >= 0, "checkpoint tensor '" << s.path << "' shape " << shape_str(s.shape));
    check_box(s);
    const int64_t n = s.box.numel();
    if (n > 0) {
      SM_CHECK(s.data.defined() && s.data.numel() == n,
               "checkpoint tensor '" << s.path << "': data holds " << (s.data.defined() ? s.data.numel() : 0)
                                     << " elements, the box " << s.box.str() << " " << n);
      SM_CHECK(!saving || s.data.dtype() == s.dtype || (is_float(s.data.dtype()) && is_float(s.dtype)),
               "checkpoint tensor '" << s.path << "': data " << dtype_name(s.data.dtype()) << ", file "
                                     << dtype_name(s.dtype));
    }
    auto it = index.find(s.path);
    if (it == index.end()) {
      index.emplace(s.path, plans.size());
      plans.push_back(TensorPlan{s.path, s.shape, s.dtype, {k}});
    } else {
      TensorPlan& p = plans[it->second];
      SM_CHECK(p.shape == s.shape && p.dtype == s.dtype,
               "checkpoint tensor '" << s.path << "' listed as " << shape_str(p.shape) << " " << dtype_name(p.dtype)
                                     << " and as " << shape_str(s.shape) << " " << dtype_name(s.dtype));
      p.shards.push_back(k);
    }
  }
  return plans;
}

void require_same_everywhere(const Group& g, const std::vector<TensorPlan>& plans, const std::string& settings,
                             const char* what) {
  if (!g.comm) return;
  std::string text = settings;
  for (const TensorPlan& t : plans) {
    text += '\0';
    text += t.path;
    text += '\0';
    text += shape_str(t.shape);
    text += dtype_name(t.dtype);
  }
  const int64_t mine = static_cast<int64_t>(text_hash(text) ^ (static_cast<uint64_t>(text.size()) << 40));
  std::vector<int64_t> root{mine};
  g.bcast(root);
  g.agree([&] {
    SM_CHECK(root[0] == mine, what << ": the ranks pass different tensor lists (paths in order of first appearance, "
                                      "shapes, dtypes) or settings (rank "
                                   << g.rank() << " differs from rank 0)");
  });
}

std::vector<Run> union_runs(const Shape& shape, const std::vector<const Box*>& boxes) {
  std::vector<Run> all;
  for (const Box* b : boxes)
    for (const auto& r : box_flat_runs(shape, *b)) all.push_back({r.first, r.second});
  std::sort(all.begin(), all.end(), [](const Run& a, const Run& b) { return a.start < b.start; });
  std::vector<Run> out;
  for (const Run& r : all) {
    if (!out.empty() && r.start <= out.back().start + out.back().len)
      out.back().len = std::max(out.back().len, r.start + r.len - out.back().start);
    else
      out.push_back(r);
  }
  return out;
}

H5Handle file_space(const Shape& shape) {
  if (shape.empty()) return H5Handle(SM_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Handle(SM_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
}

H5Handle memory_space(int64_t count) {
  hsize_t m = static_cast<hsize_t>(std::max<int64_t>(count, 1));
  H5Handle ms(SM_H5_CHECK(H5Screate_simple(1, &m, nullptr)), H5Sclose);
  if (count == 0) SM_H5_CHECK(H5Sselect_none(ms.get()));
  return ms;
}

void select_boxes(hid_t space, const Shape& shape, const std::vector<const Box*>& boxes) {
  SM_H5_CHECK(H5Sselect_none(space));
  for (const Box* b : boxes) {
    if (b->empty()) continue;
    if (shape.empty()) {  // a scalar: its one element
      SM_H5_CHECK(H5Sselect_all(space));
      return;
    }
    std::vector<hsize_t> start(b->offset.begin(), b->offset.end()), count(b->count.begin(), b->count.end());
    SM_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
  }
}

H5Handle transfer_plist(const Group& g, bool independent) {
  H5Handle dxpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  if (g.comm) SM_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), independent ? H5FD_MPIO_INDEPENDENT : H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

}  // namespace ckpt
}  // namespace sm
