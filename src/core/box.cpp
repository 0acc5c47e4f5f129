// box.cpp — N-d boxes of logical tensors: intersection, flat-range decomposition, flat runs
// and box-to-box element copies (core/box.h).
#include "spikemesh/core/box.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "spikemesh/core/error.h"

namespace sm {

int64_t Box::numel() const {
  if (none) return 0;
  int64_t n = 1;
  for (int64_t c : count) n *= c;
  return n;
}

std::string Box::str() const {
  if (none) return "(none)";
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < offset.size(); ++i) os << (i ? ", " : "") << offset[i] << ":" << offset[i] + count[i];
  os << "]";
  return os.str();
}

Box full_box(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

Box empty_box(size_t ndim) {
  Box b{Shape(ndim, 0), Shape(ndim, 0)};
  b.none = true;
  return b;
}

Box intersect(const Box& a, const Box& b) {
  SM_CHECK(a.offset.size() == b.offset.size(), "intersect: boxes of rank " << a.offset.size() << " and " << b.offset.size());
  Box r{Shape(a.offset.size()), Shape(a.offset.size())};
  r.none = a.none || b.none;
  for (size_t i = 0; i < a.offset.size(); ++i) {
    const int64_t lo = std::max(a.offset[i], b.offset[i]);
    const int64_t hi = std::min(a.offset[i] + a.count[i], b.offset[i] + b.count[i]);
    r.offset[i] = lo;
    r.count[i] = std::max<int64_t>(0, hi - lo);
  }
  return r;
}

Box translate(const Box& b, const Shape& delta) {
  SM_CHECK(delta.size() == b.offset.size(), "translate: box of rank " << b.offset.size() << ", delta of " << delta.size());
  Box r = b;
  for (size_t i = 0; i < delta.size(); ++i) r.offset[i] += delta[i];
  return r;
}

std::vector<Box> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end) {
  const size_t k = shape.size();
  const int64_t total = shape_numel(shape);
  SM_CHECK(0 <= begin && begin <= end && end <= total,
           "flat range [" << begin << ", " << end << ") of a tensor of " << total << " elements");
  std::vector<Box> out;
  // block[j]: elements spanned by whole dimensions j..k-1 (block[k] = 1).
  std::vector<int64_t> block(k + 1, 1);
  for (size_t j = k; j-- > 0;) block[j] = block[j + 1] * shape[j];
  int64_t cur = begin;
  while (cur < end) {
    if (cur == 0 && end - cur >= total) {  // the whole tensor
      out.push_back(full_box(shape));
      break;
    }
    for (size_t j = 1; j <= k; ++j) {
      if (cur % block[j] != 0) continue;
      const int64_t in_dim = (cur / block[j]) % shape[j - 1];
      const int64_t n = std::min((end - cur) / block[j], shape[j - 1] - in_dim);
      if (n == 0) continue;
      Box b{Shape(k, 0), Shape(k, 1)};
      int64_t rest = cur;
      for (size_t i = 0; i < k; ++i) {  // multi-index of cur
        b.offset[i] = rest / block[i + 1];
        rest %= block[i + 1];
      }
      b.count[j - 1] = n;
      for (size_t i = j; i < k; ++i) b.count[i] = shape[i];
      out.push_back(b);
      cur += n * block[j];
      break;
    }
  }
  return out;
}

int64_t box_flat_begin(const Shape& shape, const Box& b) {
  int64_t idx = 0;
  for (size_t i = 0; i < shape.size(); ++i) idx = idx * shape[i] + b.offset[i];
  return idx;
}

std::vector<std::pair<int64_t, int64_t>> box_flat_runs(const Shape& shape, const Box& b) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (b.empty()) return runs;
  const size_t k = shape.size();
  if (k == 0) return {{0, 1}};
  // m: the outermost dimension the runs start in; every dimension after it is whole.
  size_t m = k - 1;
  while (m > 0 && b.offset[m] == 0 && b.count[m] == shape[m]) --m;
  int64_t run = b.count[m];
  for (size_t i = m + 1; i < k; ++i) run *= shape[i];
  std::vector<int64_t> idx(b.offset.begin(), b.offset.end());  // multi-index of the run's start
  while (true) {
    int64_t start = 0;
    for (size_t i = 0; i < k; ++i) start = start * shape[i] + idx[i];
    if (!runs.empty() && runs.back().first + runs.back().second == start)
      runs.back().second += run;
    else
      runs.emplace_back(start, run);
    size_t d = m;  // odometer over dimensions 0..m-1
    while (d > 0) {
      --d;
      if (++idx[d] < b.offset[d] + b.count[d]) break;
      idx[d] = b.offset[d];
      if (d == 0) return runs;
    }
    if (m == 0) return runs;
  }
}

void copy_box(const Tensor& src, const Box& src_box, Tensor& dst, const Box& dst_box, const Box& part) {
  if (part.empty()) return;
  SM_CHECK(src.dtype() == dst.dtype(), "copy_box: " << dtype_name(src.dtype()) << " into " << dtype_name(dst.dtype()));
  SM_CHECK(src.device().is_cpu() && dst.device().is_cpu(), "copy_box: host tensors only");
  SM_CHECK(src.numel() == src_box.numel() && dst.numel() == dst_box.numel(),
           "copy_box: tensors of " << src.numel() << " / " << dst.numel() << " elements for boxes "
                                   << src_box.str() << " / " << dst_box.str());
  const size_t k = part.offset.size();
  SM_CHECK(src_box.offset.size() == k && dst_box.offset.size() == k,
           "copy_box: boxes of rank " << src_box.offset.size() << " / " << dst_box.offset.size() << " / " << k);
  for (size_t i = 0; i < k; ++i)
    SM_CHECK(part.offset[i] >= src_box.offset[i] && part.offset[i] + part.count[i] <= src_box.offset[i] + src_box.count[i] &&
                 part.offset[i] >= dst_box.offset[i] && part.offset[i] + part.count[i] <= dst_box.offset[i] + dst_box.count[i],
             "copy_box: part " << part.str() << " is not inside both " << src_box.str() << " and " << dst_box.str());
  const size_t es = dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  if (k == 0) {
    std::memcpy(d, s, es);
    return;
  }
  const int64_t row = part.count[k - 1];
  std::vector<int64_t> idx(part.offset.begin(), part.offset.end());
  while (true) {
    int64_t si = 0, di = 0;
    for (size_t i = 0; i < k; ++i) {
      si = si * src_box.count[i] + (idx[i] - src_box.offset[i]);
      di = di * dst_box.count[i] + (idx[i] - dst_box.offset[i]);
    }
    std::memcpy(d + di * es, s + si * es, static_cast<size_t>(row) * es);
    size_t dim = k - 1;  // odometer over dimensions 0..k-2
    while (dim > 0) {
      --dim;
      if (++idx[dim] < part.offset[dim] + part.count[dim]) break;
      idx[dim] = part.offset[dim];
      if (dim == 0) return;
    }
    if (k == 1) return;
  }
}

}  // namespace sm
