// test_checkpoint_reshard.cpp — the one checkpoint writer/reader (io/checkpoint.h) resharding
// N-d boxes, with simulated ranks and no MPI: one process passes the shards of ALL simulated
// ranks of a layout (group = nullptr) and reads them back under another layout.
// Layouts: tensor-parallel style (2-D and 4-D conv-weight-shaped tensors split along dim 0
// into 2 parts, others along dim 1), dim 1 into 3 uneven parts (plus an overlapping whole
// request), FSDP-style flat ranges of a unit's flat buffer over 3 ranks, and flat ranges of
// tp-local flat buffers (tp 2 × dp 2). Every element read must equal the reference; every
// dataset and its crc32 must equal the whole reference tensor whatever layout wrote it.
// Also: shard lists that do not tile a tensor (gap, overlap) or disagree on a shape are
// refused before any file is written, and a mismatching shape on load writes nothing.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/io/tensor_shard.h"
#include "spikemesh/parallel/placement.h"

namespace sm {
namespace {

std::string fresh_dir(const std::string& tag) {
  std::string d = ::testing::TempDir() + "sm_reshard_" + std::to_string(getpid()) + "_" + tag;
  EXPECT_EQ(std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str()), 0);
  return d;
}
void remove_dir(const std::string& d) { std::system(("rm -rf '" + d + "'").c_str()); }

struct Ref {
  std::string path;
  Shape shape;
  Tensor whole;
  int tp_dim = -1;  // the dim the "tp" layout splits (-1: not a parameter-like tensor)
};

// Four weights (two split along dim 0, two along dim 1 by the tp layout), their exp_avg, and
// an i64 scalar buffer; every element distinct.
std::vector<Ref> references() {
  std::vector<Ref> out;
  const std::vector<std::pair<std::string, Shape>> ws = {
      {"lin.weight", {6, 4}}, {"conv.weight", {6, 4, 3, 3}}, {"lin2.weight", {4, 6}}, {"conv2.weight", {4, 6, 3, 3}}};
  for (const std::string prefix : {"params/", "optim/"})
    for (size_t k = 0; k < ws.size(); ++k) {
      Ref r;
      r.path = prefix == std::string("params/") ? param_dataset_path(ws[k].first) : optim_dataset_path(ws[k].first, "exp_avg");
      r.shape = ws[k].second;
      r.tp_dim = k < 2 ? 0 : 1;
      r.whole = Tensor::empty(r.shape, DType::F32);
      for (int64_t i = 0; i < r.whole.numel(); ++i)
        r.whole.data<float>()[i] = 0.25f * static_cast<float>(i) + 1000.0f * static_cast<float>(out.size());
      out.push_back(r);
    }
  Ref s;
  s.path = buffer_dataset_path("bn.num_batches_tracked");
  s.whole = Tensor::full({}, 1234, DType::I64);
  out.push_back(s);
  return out;
}

Tensor cut(const Tensor& whole, const Box& b) {
  Tensor out = Tensor::empty({b.numel()}, whole.dtype());
  copy_box(whole, full_box(whole.shape()), out, b, b);
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// `parts` boxes of `shape` along `dim`, part r = [r·n/parts, (r+1)·n/parts) (uneven allowed).
std::vector<Box> split(const Shape& shape, int dim, int parts) {
  std::vector<Box> out;
  for (int r = 0; r < parts; ++r) {
    Box b = full_box(shape);
    const int64_t n = shape[static_cast<size_t>(dim)], lo = r * n / parts, hi = (r + 1) * n / parts;
    b.offset[static_cast<size_t>(dim)] = lo;
    b.count[static_cast<size_t>(dim)] = hi - lo;
    out.push_back(b);
  }
  return out;
}

// A layout of simulated ranks: every rank's shards in one list, and for each held piece the
// tensor it must hold after a load.
struct Sim {
  std::vector<TensorShard> shards;
  std::vector<std::pair<Tensor, Tensor>> check;  // (held data, expected)
};

// Simulated rank r holds boxes_of(ref)[r] of each tensor (nothing past the list's end);
// the scalar: rank 0 when saving, every rank when loading.
Sim box_layout(const std::vector<Ref>& refs, int ranks, const std::function<std::vector<Box>(const Ref&)>& boxes_of,
               bool saving) {
  Sim sim;
  for (int r = 0; r < ranks; ++r)
    for (const Ref& t : refs) {
      Box b = empty_box(t.shape.size());
      if (t.shape.empty()) {
        if (r == 0 || !saving) b = full_box(t.shape);
      } else {
        const std::vector<Box> bs = boxes_of(t);
        if (static_cast<size_t>(r) < bs.size()) b = bs[static_cast<size_t>(r)];
      }
      TensorShard s{t.path, t.shape, t.whole.dtype(), b, Tensor()};
      if (!b.empty()) {
        Tensor want = cut(t.whole, b);
        s.data = saving ? want.clone() : Tensor::full({b.numel()}, -7, t.whole.dtype());
        sim.check.emplace_back(s.data, want);
      }
      sim.shards.push_back(std::move(s));
    }
  return sim;
}

// FSDP style over tp-local tensors: `tp` tensor-parallel parts (every weight split along dim 0;
// 1: none) × `dp` ranks, each holding chunk d of the flat buffer of its tp-local weights
// (params() order, padded to a multiple of dp) and of their flat exp_avg buffer.
Sim flat_layout(const std::vector<Ref>& refs, int tp, int dp, bool saving) {
  Sim sim;
  for (int t = 0; t < tp; ++t)
    for (int d = 0; d < dp; ++d) {
      std::vector<Param> params(4);
      std::vector<Param*> ps;
      Tensor flat_v, flat_s;
      int64_t total = 0;
      for (size_t k = 0; k < 4; ++k) {
        Param& p = params[k];
        p.name = refs[k].path.substr(7);  // "params/<name>"
        p.shape = p.local_shape = refs[k].shape;
        if (tp > 1) {
          p.local_shape[0] /= tp;
          p.shard = ShardSpec{ShardSpec::Group::TP, 0, t, tp};
        }
        total += shape_numel(p.local_shape);
        ps.push_back(&p);
      }
      const int64_t chunk = (total + dp - 1) / dp, begin = d * chunk;
      for (int which = 0; which < 2; ++which) {
        Tensor flat = Tensor::zeros({chunk * dp}, DType::F32);  // the padded flat buffer
        int64_t at = 0;
        for (size_t k = 0; k < 4; ++k) {
          const Tensor local = cut(refs[k + 4 * which].whole, param_local_box(*ps[k]));
          std::memcpy(flat.data<float>() + at, local.raw(), local.nbytes());
          at += local.numel();
        }
        Tensor want = flat.slice0(begin, begin + chunk).clone();
        Tensor mine = saving ? want.clone() : Tensor::full({chunk}, -7, DType::F32);
        append_flat_shards(sim.shards, ps, begin, begin + chunk, mine, which ? "exp_avg" : "");
        const int64_t used = std::max<int64_t>(0, std::min(begin + chunk, total) - begin);
        sim.check.emplace_back(mine.slice0(0, used), want.slice0(0, used));  // padding is not in the file
      }
    }
  // The scalar buffer: rank 0 when saving, every rank when loading.
  const Ref& sc = refs.back();
  for (int r = 0; r < tp * dp; ++r) {
    const bool holds = r == 0 || !saving;
    TensorShard s{sc.path, sc.shape, DType::I64, holds ? full_box({}) : empty_box(0), Tensor()};
    if (holds) {
      s.data = saving ? sc.whole.clone() : Tensor::full({}, -7, DType::I64);
      sim.check.emplace_back(s.data, sc.whole);
    }
    sim.shards.push_back(std::move(s));
  }
  return sim;
}

void expect_filled(const Sim& sim, const std::string& what) {
  for (size_t i = 0; i < sim.check.size(); ++i)
    EXPECT_TRUE(same_bytes(sim.check[i].first, sim.check[i].second)) << what << ": piece " << i;
}

CheckpointMeta meta_at(int64_t step) {
  CheckpointMeta cm;
  cm.model = "synthetic";
  cm.optimizer = "adam";
  cm.optimizer_step = 5;
  cm.state.step = step;
  cm.state.epoch = 1;
  cm.precision = "fp32";
  cm.mesh = "simulated";
  return cm;
}

// Every dataset of the file equals its reference whole, and its crc32 attribute the crc of it.
void expect_file_holds(const std::string& path, const std::vector<Ref>& refs) {
  H5File f = H5File::open(path);
  for (const Ref& r : refs) {
    Tensor t = f.read(r.path);
    EXPECT_EQ(t.shape(), r.shape) << r.path;
    EXPECT_TRUE(same_bytes(t, r.whole)) << r.path;
    H5Handle ds(H5Dopen2(f.id(), r.path.c_str(), H5P_DEFAULT), H5Dclose);
    int64_t crc = -1;
    H5Aread(H5Handle(H5Aopen(ds.get(), "crc32", H5P_DEFAULT), H5Aclose).get(), H5T_NATIVE_INT64, &crc);
    const uLong want = crc32(0, static_cast<const Bytef*>(r.whole.raw()), static_cast<uInt>(r.whole.nbytes()));
    EXPECT_EQ(crc, static_cast<int64_t>(want)) << r.path;
  }
}

std::vector<Box> tp_boxes(const Ref& r) { return split(r.shape, r.tp_dim, 2); }

}  // namespace

TEST(CheckpointReshard, TpSplitWrittenThenReadUnderOtherSplits) {
  const std::string dir = fresh_dir("tp");
  const std::vector<Ref> refs = references();
  Sim tp = box_layout(refs, 2, tp_boxes, true);
  // Rank 0's shards precede rank 1's: each path appears twice, far apart.
  const std::string path = write_checkpoint(nullptr, dir, tp.shards, meta_at(3), 2);
  EXPECT_EQ(path, checkpoint_path(dir, 3));
  expect_file_holds(path, refs);

  // Dim 1 into 3 uneven parts (4 columns: 1, 1, 2), plus every part of conv.weight asked whole too.
  Sim thirds = box_layout(refs, 3, [](const Ref& r) { return split(r.shape, 1, 3); }, false);
  Tensor whole_conv = Tensor::full({refs[1].whole.numel()}, -7, DType::F32);
  thirds.shards.push_back(TensorShard{refs[1].path, refs[1].shape, DType::F32, full_box(refs[1].shape), whole_conv});
  thirds.check.emplace_back(whole_conv, refs[1].whole.view({refs[1].whole.numel()}));
  const CheckpointInfo ci = read_checkpoint(nullptr, path, thirds.shards, meta_at(0));
  expect_filled(thirds, "dim 1 in 3");
  EXPECT_EQ(ci.state.step, 3);
  EXPECT_EQ(ci.optimizer_step, 5);
  EXPECT_EQ(ci.model, "synthetic");

  // FSDP-style flat ranges over 3 ranks, and tp 2 × dp 2 flat ranges of tp-local buffers.
  Sim flat = flat_layout(refs, 1, 3, false);
  read_checkpoint(nullptr, path, flat.shards, meta_at(0));
  expect_filled(flat, "flat dp 3");
  Sim tpdp = flat_layout(refs, 2, 2, false);
  read_checkpoint(nullptr, path, tpdp.shards, meta_at(0));
  expect_filled(tpdp, "tp 2 x dp 2 flat");
  remove_dir(dir);
}

TEST(CheckpointReshard, FlatTpLayoutWrittenThenReadAsTpSlices) {
  const std::string dir = fresh_dir("flat");
  const std::vector<Ref> refs = references();
  for (int tp : {1, 2}) {
    Sim flat = flat_layout(refs, tp, 3, true);
    const std::string path = write_checkpoint(nullptr, dir, flat.shards, meta_at(10 + tp), 5);
    expect_file_holds(path, refs);
    Sim slices = box_layout(refs, 2, tp_boxes, false);
    read_checkpoint(nullptr, path, slices.shards, meta_at(0));
    expect_filled(slices, "tp slices from flat tp " + std::to_string(tp));
  }
  remove_dir(dir);
}

TEST(CheckpointReshard, ShardListsThatDoNotTileAreRefusedBeforeWriting) {
  const std::string dir = fresh_dir("tiling");
  const std::vector<Ref> refs = references();
  auto error_of = [&](const std::vector<TensorShard>& shards, ErrorKind* kind) {
    try {
      write_checkpoint(nullptr, dir, shards, meta_at(1), 2);
    } catch (const Error& e) {
      *kind = e.kind();
      return std::string(e.what());
    }
    return std::string();
  };
  ErrorKind kind = ErrorKind::Input;
  // A gap: rank 1's half of conv.weight missing (its box emptied).
  Sim gap = box_layout(refs, 2, tp_boxes, true);
  for (TensorShard& s : gap.shards)
    if (s.path == refs[1].path && s.box.offset[0] == 3) s.box = empty_box(4), s.data = Tensor();
  std::string e = error_of(gap.shards, &kind);
  EXPECT_EQ(kind, ErrorKind::Internal) << e;
  EXPECT_NE(e.find(refs[1].path), std::string::npos) << e;
  EXPECT_NE(e.find("do not tile"), std::string::npos) << e;
  // An overlap: lin2.weight's first half listed twice.
  Sim twice = box_layout(refs, 2, tp_boxes, true);
  twice.shards.push_back(twice.shards[2]);
  e = error_of(twice.shards, &kind);
  EXPECT_EQ(kind, ErrorKind::Internal) << e;
  EXPECT_NE(e.find(refs[2].path), std::string::npos) << e;
  EXPECT_NE(e.find("held twice"), std::string::npos) << e;
  // One path with two shapes.
  Sim shapes = box_layout(refs, 2, tp_boxes, true);
  shapes.shards.push_back(TensorShard{refs[0].path, {24}, DType::F32, empty_box(1), Tensor()});
  e = error_of(shapes.shards, &kind);
  EXPECT_NE(e.find(refs[0].path), std::string::npos) << e;
  // Data of the wrong size for its box.
  Sim size = box_layout(refs, 2, tp_boxes, true);
  size.shards[0].data = Tensor::zeros({5}, DType::F32);
  e = error_of(size.shards, &kind);
  EXPECT_NE(e.find("data holds 5"), std::string::npos) << e;
  // Nothing was written.
  EXPECT_NE(std::system(("ls '" + dir + "'/ckpt_* >/dev/null 2>&1").c_str()), 0);
  remove_dir(dir);
}

TEST(CheckpointReshard, MismatchingShapeOnLoadWritesNothing) {
  const std::string dir = fresh_dir("shape");
  std::vector<Ref> refs = references();
  const std::string path = write_checkpoint(nullptr, dir, box_layout(refs, 2, tp_boxes, true).shards, meta_at(2), 1);
  refs[3].shape = {4, 6, 1, 1};  // conv2.weight asked for with another kernel size
  refs[3].whole = Tensor::zeros(refs[3].shape, DType::F32);
  Sim sim = box_layout(refs, 2, tp_boxes, false);
  std::string e;
  try {
    read_checkpoint(nullptr, path, sim.shards, meta_at(0));
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::Input);
    e = err.what();
  }
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("/params/conv2.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[4, 6, 1, 1]"), std::string::npos) << e;
  int64_t touched = 0;
  for (const auto& c : sim.check)
    for (int64_t i = 0; i < c.first.numel(); ++i) touched += c.first.at(i) != -7.0;
  EXPECT_EQ(touched, 0);
  remove_dir(dir);
}

}  // namespace sm
