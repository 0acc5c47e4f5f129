// fuzz_checkpoint.cpp — structure-aware libFuzzer harness for the checkpoint reader
// (src/io/checkpoint_read.cpp read_checkpoint_info and read_checkpoint with Comm* nullptr: one
// process, no MPI call; checkpoint_verify.cpp verify_checkpoint_checksums and scan_checkpoint,
// which `ckpt verify` uses and which must never throw). Each input builds a real
// checkpoint: the project's own writer (write_checkpoint, group nullptr) saves 1-3 params
// (rank 0-3, dims 0-3, f32/f64), an optional i64 buffer and optional optimizer state, with
// /meta values from the input; then up to 8 perturbations (tests/fuzz/h5_perturb.h): tensors
// deleted / replaced by other ranks, shapes, element types or groups, extra tensors, single
// elements changed (checksum mismatch), crc32 attributes deleted / rewritten / of the wrong
// type or shape, /meta and root attributes rewritten or deleted (complete, format_version,
// step, model, ...). The load request itself may differ from the file (other shape, other
// model name, split or overlapping boxes). Expected outcomes: success or sm::Error.
// Properties: an unperturbed checkpoint loads (every reader succeeds, the scan finds nothing) and
// gives back exactly the saved values and /meta; a load never writes into the caller's tensors
// when it fails; the scan never throws and finds a problem where the info or checksum check fails.
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "h5_perturb.h"
#include "spikemesh/io/checkpoint.h"

namespace {

struct Tensors {
  std::vector<std::string> paths;
  std::vector<sm::Shape> shapes;
  std::vector<sm::DType> dtypes;
  std::vector<sm::Tensor> values;
};

Tensors choose_tensors(fuzz::Bytes& in) {
  Tensors t;
  const int params = 1 + in.u8() % 3;
  auto add = [&](const std::string& path, sm::DType dt) {
    sm::Shape s;
    const int rank = in.u8() % 4;
    for (int d = 0; d < rank; ++d) s.push_back(in.u8() % 8 == 0 ? 0 : 1 + in.u8() % 3);
    sm::Tensor v = sm::Tensor::zeros(s, dt);
    for (int64_t i = 0; i < v.numel(); ++i) {
      if (dt == sm::DType::F32) v.data<float>()[i] = float(in.u8()) - 100.0f;
      else if (dt == sm::DType::F64) v.data<double>()[i] = double(in.u8()) / 3.0;
      else v.data<int64_t>()[i] = int64_t(in.u32());
    }
    t.paths.push_back(path);
    t.shapes.push_back(s);
    t.dtypes.push_back(dt);
    t.values.push_back(v);
  };
  for (int p = 0; p < params; ++p) add("params/w" + std::to_string(p), in.flag() ? sm::DType::F64 : sm::DType::F32);
  if (in.flag()) add("buffers/count", sm::DType::I64);
  if (in.flag()) add(sm::optim_dataset_path("w0", "exp_avg"), sm::DType::F32);
  return t;
}

// Shards asking for every tensor: the whole box, or its dim-0 halves, or whole + a half (overlap).
std::vector<sm::TensorShard> shards_of(const Tensors& t, fuzz::Bytes& in, bool with_values) {
  std::vector<sm::TensorShard> out;
  for (size_t i = 0; i < t.paths.size(); ++i) {
    const sm::Shape& s = t.shapes[i];
    std::vector<sm::Box> boxes = {sm::full_box(s)};
    const uint8_t how = with_values ? 0 : in.u8() % 3;
    if (how > 0 && !s.empty() && s[0] >= 2) {
      sm::Box lo = sm::full_box(s), hi = sm::full_box(s);
      lo.count[0] = s[0] / 2;
      hi.offset[0] = s[0] / 2;
      hi.count[0] = s[0] - s[0] / 2;
      boxes = how == 1 ? std::vector<sm::Box>{lo, hi} : std::vector<sm::Box>{sm::full_box(s), hi};
    }
    for (const sm::Box& b : boxes) {
      sm::TensorShard sh;
      sh.path = t.paths[i];
      sh.shape = s;
      sh.dtype = t.dtypes[i];
      sh.box = b;
      sh.data = with_values ? t.values[i] : sm::Tensor::full({b.numel()}, -7.0, t.dtypes[i]);
      out.push_back(sh);
    }
  }
  return out;
}

const char* const kMetaAttrs[] = {"complete", "format_version", "step", "epoch", "batch_in_epoch", "seed",
                                  "optimizer_step", "model", "optimizer", "precision", "mesh", "config",
                                  "num_optim_states", "loss_scale", "loss_scale_finite_in_row", "skipped_steps"};
const char* const kRootAttrs[] = {"model", "format", "format_version", "dtype"};

void perturb(const std::string& file, const Tensors& t, int ops, fuzz::Bytes& in) {
  auto f = fuzz::h5(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!f.valid()) fuzz::fail("cannot reopen the checkpoint the writer made");
  for (int k = 0; k < ops; ++k) {
    const uint8_t pick = in.u8();
    const std::string tensor = "/" + t.paths[pick % t.paths.size()];
    switch (in.u8() % 9) {
      case 0: fuzz::delete_link(f.get(), in.flag() ? tensor : in.flag() ? "/meta" : "/params"); break;
      case 1: fuzz::replace_dataset(f.get(), in.flag() ? tensor : "/params/extra", in); break;
      case 2: case 3: fuzz::replace_attr(f.get(), "/meta", kMetaAttrs[in.u8() % 16], in); break;
      case 4: fuzz::replace_attr(f.get(), tensor, "crc32", in); break;
      case 5: fuzz::poke_element(f.get(), tensor, in); break;
      case 6: fuzz::replace_attr(f.get(), ".", kRootAttrs[in.u8() % 4], in); break;
      case 7: fuzz::swap_kind(f.get(), in.flag() ? tensor : "/optim", in.flag(), in); break;
      default: fuzz::replace_dataset(f.get(), "/optim/w1/momentum_buffer", in); break;
    }
  }
}

bool same_bytes(const sm::Tensor& a, const sm::Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), size_t(a.numel()) * sm::dtype_size(a.dtype())) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::scratch_path("fuzz_ckpt");
  static const bool quiet = (fuzz::quiet_logs(), H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr), true);
  (void)quiet;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  fuzz::Bytes in(data, size);

  const Tensors t = choose_tensors(in);
  sm::CheckpointMeta meta;
  meta.state.step = in.u8();
  meta.state.epoch = in.range(0, 5);
  meta.state.batch_in_epoch = in.u8();
  meta.state.seed = int64_t(in.u64() >> 1);
  meta.state.loss_scale = in.flag() ? 65536.0 : 0.0;
  meta.model = "fuzznet";
  meta.optimizer = "adam";
  meta.optimizer_step = meta.state.step;
  meta.precision = "fp32";
  meta.config_toml = in.flag() ? "" : "seed = " + std::to_string(in.u8()) + "\nmodel = \"fuzznet\"\n";
  const std::string file = sm::write_checkpoint(nullptr, dir, shards_of(t, in, true), meta, 1);

  const int ops = in.u8() % 9;
  if (ops > 0) perturb(file, t, ops, in);

  // The request: usually the model that wrote it; sometimes another name or one other shape.
  Tensors want = t;
  sm::CheckpointMeta expect = meta;
  const uint8_t twist = ops > 0 ? in.u8() % 8 : 0;
  if (twist == 1) expect.model = "othernet";
  if (twist == 2) want.shapes[0].push_back(2);
  std::vector<sm::TensorShard> request = shards_of(want, in, false);

  bool info_ok = false, sums_ok = false, load_ok = false;
  sm::CheckpointInfo info;
  std::string errors;
  info_ok = fuzz::expect_ok_or_input_error([&] { info = sm::read_checkpoint_info(file); });
  if (!info_ok) errors += "read_checkpoint_info: " + fuzz::last_error() + "\n";
  sums_ok = fuzz::expect_ok_or_input_error([&] { sm::verify_checkpoint_checksums(file); });
  if (!sums_ok) errors += "verify_checkpoint_checksums: " + fuzz::last_error() + "\n";
  load_ok = fuzz::expect_ok_or_input_error([&] { (void)sm::read_checkpoint(nullptr, file, request, expect); });
  if (!load_ok) errors += "read_checkpoint: " + fuzz::last_error() + "\n";
  // `ckpt verify`'s scan: never throws, and finds a problem wherever the readers above refuse /meta or a checksum.
  sm::CheckpointScan scan;
  try {
    scan = sm::scan_checkpoint(file, in.flag() ? &request : nullptr);
  } catch (const std::exception& e) {
    fuzz::fail(std::string("scan_checkpoint threw: ") + e.what());
  }
  if ((!info_ok || !sums_ok) && scan.problems.empty())
    fuzz::fail("scan_checkpoint found no problem in a file the readers refuse:\n" + errors);

  if (!load_ok)
    for (const sm::TensorShard& s : request)
      for (int64_t i = 0; i < s.data.numel(); ++i) {
        const double v = s.data.dtype() == sm::DType::F32   ? s.data.data<float>()[i]
                         : s.data.dtype() == sm::DType::F64 ? s.data.data<double>()[i]
                                                            : double(s.data.data<int64_t>()[i]);
        if (v != -7.0) fuzz::fail("a failed read_checkpoint wrote into the caller's tensor " + s.path);
      }
  if (ops == 0) {
    if (!info_ok || !sums_ok || !load_ok) fuzz::fail("an unperturbed checkpoint does not load:\n" + errors);
    if (!scan.problems.empty()) fuzz::fail("scan_checkpoint finds a problem in an unperturbed checkpoint: " + scan.problems[0]);
    if (info.state.step != meta.state.step || info.state.seed != meta.state.seed || info.model != meta.model ||
        info.config_toml != meta.config_toml || info.state.epoch != meta.state.epoch)
      fuzz::fail("read_checkpoint_info does not give back the saved /meta");
    for (const sm::TensorShard& s : request) {
      size_t i = 0;
      while (t.paths[i] != s.path) ++i;
      sm::Tensor expect_box = sm::Tensor::zeros({s.box.numel()}, s.dtype);
      sm::copy_box(t.values[i], sm::full_box(t.shapes[i]), expect_box, s.box, s.box);
      if (!same_bytes(expect_box, s.data)) fuzz::fail("read_checkpoint did not give back the saved values of " + s.path);
    }
  }
  return 0;
}
