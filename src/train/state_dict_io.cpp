// state_dict_io.cpp — state dicts in and out (train/state_dict_io.h): file kinds told apart by
// their first bytes, the model/file comparison that names every problem at once, the step-0
// checkpoint an import writes, and the exports.
#include "spikemesh/train/state_dict_io.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/train/checkpoint_tools.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/train/nir_export.h"
#include "spikemesh/train/train_plan.h"

namespace sm {

namespace {

std::string first_bytes(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) SM_INPUT_ERROR(path << ": cannot open (" << std::strerror(errno) << ")");
  std::string s(n, '\0');
  in.read(&s[0], static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

NamedTensors read_h5_state_dict(const std::string& path, std::string* kind) {
  H5File f = H5File::open(path);
  const std::string format = f.has_attr("format") ? f.attr_string("format") : "";
  NamedTensors out;
  if (format == "spikemesh-flat-state-dict") {
    for (const std::string& n : f.list_datasets()) out.emplace_back(n, f.read(n));
    if (kind) *kind = "h5 export";
    return out;
  }
  if (format == "spikemesh-state-dict") {
    if (f.has_group("meta")) {  // a checkpoint: complete, and every checksum right
      read_checkpoint_info(path);
      verify_checkpoint_checksums(path);
    }
    for (const char* g : {"params", "buffers"}) {
      if (!f.has_group(g)) continue;
      H5Group grp = f.open_group(g);
      for (const std::string& n : grp.list_datasets()) out.emplace_back(n, grp.read(n));
    }
    if (kind) *kind = "checkpoint";
    return out;
  }
  SM_INPUT_ERROR(path << ": an HDF5 file, but not a state dict (neither a `spikemesh ckpt export` file nor a "
                         "checkpoint: no format attribute spikemesh-flat-state-dict / spikemesh-state-dict)");
}

bool is_float(DType d) { return d == DType::F64 || d == DType::F32 || d == DType::F16 || d == DType::BF16; }

// "a, b, c (+N more)"
std::string listed(const std::vector<std::string>& v, size_t at_most = 6) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < at_most; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > at_most) s += " (+" + std::to_string(v.size() - at_most) + " more)";
  return s;
}

// Removes a prefix every name carries ("module.", "_orig_mod.").
void strip_wrapper_prefixes(NamedTensors& file, std::vector<std::string>& notes) {
  for (const char* prefix : {"module.", "_orig_mod."}) {
    const size_t n = std::strlen(prefix);
    bool all = !file.empty();
    for (const auto& e : file) all = all && e.first.compare(0, n, prefix) == 0;
    if (!all) continue;
    for (auto& e : file) e.first.erase(0, n);
    notes.push_back(std::string("every name started with '") + prefix + "': taken without it");
  }
}

// The first non-finite element of a float tensor (-1: none).
int64_t first_nonfinite(const Tensor& t) {
  if (!is_float(t.dtype())) return -1;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.at(i))) return i;
  return -1;
}

struct Target {
  std::string name;
  Tensor* value;
  Shape shape;
  bool integer;
};

std::vector<Target> targets_of(Model& model) {
  std::vector<Target> t;
  for (Param* p : model.params()) t.push_back({p->name, &p->value, p->shape, false});
  for (Buffer* b : model.buffers()) t.push_back({b->name, &b->value, b->shape, b->integer});
  return t;
}

std::unique_ptr<Model> build_model(const TrainConfig& cfg) {
  std::unique_ptr<Model> m = model_selection_of(cfg).build();
  m->finalize(master_dtype(precision_from_name(cfg.precision)), Device::cpu(), static_cast<uint64_t>(cfg.seed));
  return m;
}

}  // namespace

StateDictFormat state_dict_format(const std::string& flag, const std::string& out) {
  if (flag == "h5") return StateDictFormat::H5;
  if (flag == "safetensors") return StateDictFormat::Safetensors;
  if (flag == "nir") return StateDictFormat::Nir;
  if (!flag.empty()) SM_INPUT_ERROR("--format " << flag << ": must be h5, safetensors or nir");
  auto ends = [&](const std::string& ext) {
    return out.size() >= ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends(".safetensors")) return StateDictFormat::Safetensors;
  if (ends(".nir")) return StateDictFormat::Nir;
  return StateDictFormat::H5;
}

NamedTensors read_state_dict_file(const std::string& path, std::string* kind) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) SM_INPUT_ERROR(path << ": no such file");
  const std::string head = first_bytes(path, 8);
  if (head == std::string("\x89HDF\r\n\x1a\n", 8)) return read_h5_state_dict(path, kind);
  if (head.compare(0, 4, "PK\x03\x04") == 0 || (!head.empty() && static_cast<unsigned char>(head[0]) == 0x80))
    SM_INPUT_ERROR(path << ": a PyTorch file (torch.save); convert it first: /usr/bin/python3 "
                           "scripts/torch_to_safetensors.py "
                        << path << " model.safetensors");
  if (kind) *kind = "safetensors";
  return read_safetensors(path);
}

void load_state_dict(Model& model, NamedTensors file, const std::string& origin, std::vector<std::string>& notes) {
  strip_wrapper_prefixes(file, notes);
  std::map<std::string, Tensor*> by_name;
  std::vector<std::string> problems, extra, missing, misshapen, wrong_dtype;
  for (auto& e : file)
    if (!by_name.emplace(e.first, &e.second).second) problems.push_back("tensor " + e.first + " appears twice");
  const std::vector<Target> targets = targets_of(model);
  std::map<std::string, const Target*> wanted;
  for (const Target& t : targets) wanted[t.name] = &t;
  for (const auto& e : file)
    if (!wanted.count(e.first)) extra.push_back(e.first);
  for (const Target& t : targets) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      missing.push_back(t.name);
      continue;
    }
    const Tensor& v = *it->second;
    if (v.shape() != t.shape)
      misshapen.push_back(t.name + " is " + shape_str(v.shape()) + " in the file, " + shape_str(t.shape) + " in the model");
    if (t.integer ? !(v.dtype() == DType::I64 || v.dtype() == DType::I32) : !is_float(v.dtype()))
      wrong_dtype.push_back(t.name + " is " + dtype_name(v.dtype()) + " (the model needs " +
                            (t.integer ? "an integer: I64 or I32" : "a float: F64, F32, F16 or BF16") + ")");
  }
  if (!missing.empty()) problems.push_back("missing " + listed(missing));
  if (!extra.empty()) problems.push_back("not in the model " + listed(extra));
  if (!misshapen.empty()) problems.push_back("misshapen: " + listed(misshapen, 3));
  if (!wrong_dtype.empty()) problems.push_back("wrong dtype: " + listed(wrong_dtype, 3));
  if (!problems.empty()) {
    std::ostringstream os;
    for (size_t i = 0; i < problems.size(); ++i) os << (i ? "; " : "") << problems[i];
    if (missing.size() == targets.size() && !file.empty())
      os << " (no name matches: a state dict of another model? this model's names begin with "
         << listed({targets[0].name, targets.size() > 1 ? targets[1].name : targets[0].name}, 2) << ")";
    SM_INPUT_ERROR(origin << ": does not fit model " << model.info.name << ": " << os.str());
  }
  std::vector<Tensor> converted;  // every value checked in the model's dtype before any is copied
  for (const Target& t : targets) {
    const Tensor& v = *by_name[t.name];
    converted.push_back(v.dtype() == t.value->dtype() ? v : v.to_dtype(t.value->dtype()));
    const int64_t bad = first_nonfinite(converted.back());
    if (bad >= 0)
      SM_INPUT_ERROR(origin << ": tensor " << t.name << " holds " << v.at(bad) << " at element " << bad
                            << (std::isfinite(v.at(bad)) ? std::string(", beyond the range of ") + dtype_name(t.value->dtype())
                                                         : std::string()));
    if (dtype_size(v.dtype()) > dtype_size(t.value->dtype()) && !t.integer)
      notes.push_back(t.name + ": " + dtype_name(v.dtype()) + " rounded to " + dtype_name(t.value->dtype()));
  }
  for (size_t i = 0; i < targets.size(); ++i) targets[i].value->copy_from(converted[i]);
}

ImportSummary import_state_dict(const std::string& in, const std::string& out, const TrainConfig& cfg,
                                const std::string& config_toml) {
  std::error_code ec;
  if (out == in || std::filesystem::equivalent(in, out, ec))
    SM_INPUT_ERROR("--out " << out << " is the input file itself; name another file");
  ImportSummary s;
  NamedTensors file = read_state_dict_file(in, &s.kind);
  std::unique_ptr<Model> model = build_model(cfg);
  load_state_dict(*model, std::move(file), in, s.notes);
  s.model = model->info.name;
  s.tensors = static_cast<int64_t>(model->params().size() + model->buffers().size());
  s.elements = model->num_parameters();
  std::unique_ptr<Optimizer> opt = make_optimizer(optimizer_config_of(cfg), model->params());
  TrainState st;
  st.seed = cfg.seed;
  const std::string dir = out + ".import.d";  // the checkpoint is written there, then renamed to `out`
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) SM_INPUT_ERROR(out << ": cannot create " << dir << " (" << ec.message() << ")");
  try {
    const std::string written = save_model_checkpoint(dir, *model, *opt, st, config_toml, cfg.precision, 1);
    std::filesystem::rename(written, out);
  } catch (const std::exception& e) {
    std::filesystem::remove_all(dir, ec);
    SM_INPUT_ERROR(out << ": cannot write the checkpoint (" << e.what() << ")");
  }
  std::filesystem::remove_all(dir, ec);
  return s;
}

std::string write_state_dict(CheckpointModel& cm, const std::string& out, StateDictFormat format, double nir_dt,
                             const std::string& source) {
  Model& m = *cm.model;
  std::ostringstream os;
  if (format == StateDictFormat::Nir) {
    const NirExportInfo ni = write_nir_graph(m, out, nir_dt, source);
    os << "wrote " << out << ": NIR graph of model " << m.info.name << ", " << ni.nodes << " nodes (" << ni.folded_bn
       << " batch norms folded, " << ni.dropped << " dropout layers left out), dt " << nir_dt << " s";
    return os.str();
  }
  if (format == StateDictFormat::Safetensors) {
    NamedTensors t;
    for (Param* p : m.params()) t.emplace_back(p->name, p->value);
    for (Buffer* b : m.buffers()) t.emplace_back(b->name, b->value);
    write_safetensors(out, t,
                      {{"format", "pt"}, {"producer", "spikemesh"}, {"model", cm.info.model},
                       {"T", std::to_string(cm.T)}, {"step", std::to_string(cm.info.state.step)},
                       {"precision", cm.info.precision}, {"source", source}});
  } else {
    export_flat_h5(cm, out, source);
  }
  os << "wrote " << out << ": " << m.params().size() << " parameters (" << m.num_parameters() << " elements) + "
     << m.buffers().size() << " buffers of model " << cm.info.model << ", T " << cm.T << ", step " << cm.info.state.step;
  return os.str();
}

}  // namespace sm
