// nir_export.cpp — a model as a NIR graph file (train/nir_export.h): the model's leaf layers in
// order, each mapped to a NIR node (batch norm folded into the weight layer before it), written
// with HDF5's C API where NIR needs variable-length UTF-8 strings (node types, edges).
#include "spikemesh/train/nir_export.h"

#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/linear.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/models/model.h"

namespace sm {

namespace {

// The version of the NIR file layout written (that of the `nir` package release it was checked against).
constexpr const char* kNirVersion = "1.0.8";

struct Leaf {
  Layer* layer;
  Shape in;  // per-sample input shape
};

[[noreturn]] void inexpressible(const Model& m, const Layer& l, const std::string& why) {
  SM_INPUT_ERROR("model " << m.info.name << " cannot be exported to NIR: layer " << l.name() << " (" << l.type()
                          << ") " << why);
}

std::string why_not(const std::string& type) {
  if (type == "maxpool2d")
    return "is a max pooling, which NIR cannot express; build the model with avgpool2d instead (e.g. --model "
           "fmnist_csnn_avgpool for the CSNN)";
  if (type == "ssa") return "is a spiking self-attention, which NIR cannot express";
  if (type == "conv1d") return "is a 1-D token convolution, which this export does not map";
  if (type == "mean") return "averages over tokens, which NIR cannot express";
  return "is a block with branches (" + type + "), which this export does not map (chains of layers only)";
}

// The leaves of `l` in forward order, with their per-sample input shapes.
void collect_leaves(const Model& m, Layer& l, Shape& shape, std::vector<Leaf>& out) {
  if (l.type() == "sequential" || l.type() == "unit") {
    for (Layer* c : l.children()) collect_leaves(m, *c, shape, out);
    return;
  }
  static const char* kLeaves[] = {"conv2d", "linear", "batchnorm2d", "batchnorm1d", "avgpool2d", "flatten",
                                  "dropout", "if", "lif", "plif"};
  bool known = false;
  for (const char* k : kLeaves) known = known || l.type() == k;
  if (!known || !l.children().empty()) inexpressible(m, l, why_not(l.type()));
  out.push_back({&l, shape});
  shape = l.output_shape(shape);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.at(i);
  return v;
}

Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F64)
      t.data<double>()[i] = v[i];
    else
      t.data<float>()[i] = static_cast<float>(v[i]);
  }
  return t;
}

const Tensor* named(const std::vector<Param*>& ps, const char* local) {
  for (const Param* p : ps)
    if (p->local_name == local) return &p->value;
  return nullptr;
}
const Tensor& buffer(Layer& l, const char* local) {
  for (const Buffer* b : l.buffers())
    if (b->local_name == local) return b->value;
  throw_internal_error(l.name() + " has no buffer " + local, __FILE__, __LINE__);
}

// ---- HDF5 writing -------------------------------------------------------------------------------

void h5ok(herr_t rc, const char* what) {
  if (rc < 0) SM_INPUT_ERROR("NIR export: HDF5 failed to " << what);
}

// Variable-length UTF-8 strings as h5py writes them: a scalar (shape {}) or an array.
void write_strings(const H5Group& g, const std::string& name, const std::vector<std::string>& v, const Shape& shape) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  h5ok(H5Tset_size(type.get(), H5T_VARIABLE), "make a string type");
  h5ok(H5Tset_cset(type.get(), H5T_CSET_UTF8), "make a string type");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Handle space(shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                 H5Sclose);
  H5Handle ds(H5Dcreate2(g.id(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) SM_INPUT_ERROR("NIR export: HDF5 failed to create " << name);
  std::vector<const char*> ptrs;
  for (const std::string& s : v) ptrs.push_back(s.c_str());
  h5ok(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), "write a string");
}

void write_i64(const H5Group& g, const std::string& name, const std::vector<int64_t>& v, bool scalar = false) {
  g.write_raw(name, DType::I64, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())}, v.data());
}

void write_full(const H5Group& g, const std::string& name, const Shape& shape, double value) {
  g.write(name, Tensor::full(shape, value, DType::F64));
}

// ---- the nodes ------------------------------------------------------------------------------------

class GraphWriter {
 public:
  GraphWriter(Model& m, H5Group nodes, double dt) : m_(m), nodes_(std::move(nodes)), dt_(dt) {}

  // Maps leaves[i] (and a batch norm right after a weight layer); returns the next index.
  size_t map(const std::vector<Leaf>& leaves, size_t i) {
    Layer& l = *leaves[i].layer;
    const std::string t = l.type();
    const bool bn_next = i + 1 < leaves.size() && leaves[i + 1].layer->type().rfind("batchnorm", 0) == 0;
    if (t == "conv2d" || t == "linear") {
      weight_node(l, leaves[i].in, bn_next ? leaves[i + 1].layer : nullptr);
      return i + (bn_next ? 2 : 1);
    }
    if (t.rfind("batchnorm", 0) == 0) inexpressible(m_, l, "does not follow a convolution or linear layer (NIR has no batch norm)");
    if (t == "dropout") {
      ++info.dropped;
      return i + 1;
    }
    H5Group g = open_node(l);
    if (t == "avgpool2d") {
      const PoolConfig& c = dynamic_cast<Pool2d&>(l).config();
      write_strings(g, "type", {"AvgPool2d"}, {});
      write_i64(g, "kernel_size", {c.kernel}, true);
      write_i64(g, "stride", {c.stride}, true);
      write_i64(g, "padding", {c.padding}, true);
    } else if (t == "flatten") {
      write_strings(g, "type", {"Flatten"}, {});
      write_i64(g, "start_dim", {0}, true);
      write_i64(g, "end_dim", {-1}, true);
      write_i64(g, "input_type", leaves[i].in);
    } else {
      neuron_node(g, dynamic_cast<Neuron&>(l), leaves[i].in);
    }
    return i + 1;
  }

  H5Group open_node(const std::string& name) {
    chain_.push_back(name);
    ++info.nodes;
    return nodes_.require_group(name);
  }
  H5Group open_node(const Layer& l) {
    std::string n = l.name();
    for (char& c : n)
      if (c == '.') c = '_';
    return open_node(n);
  }

  NirExportInfo info;
  std::vector<std::string> chain_;  // node names in order

 private:
  void weight_node(Layer& l, const Shape& in, Layer* bn) {
    const std::vector<Param*> ps = l.params();
    const Tensor& w = *named(ps, "weight");
    const Tensor* b = named(ps, "bias");
    const int64_t cout = w.dim(0), per = w.numel() / cout;
    std::vector<double> wv = values(w), bv = b ? values(*b) : std::vector<double>(static_cast<size_t>(cout), 0.0);
    if (bn) {  // y = (Wx + b - mean) * gamma / sqrt(var + eps) + beta
      const std::vector<Param*> bp = bn->params();
      const std::vector<double> gamma = values(*named(bp, "weight")), beta = values(*named(bp, "bias"));
      const std::vector<double> mean = values(buffer(*bn, "running_mean")), var = values(buffer(*bn, "running_var"));
      const double eps = dynamic_cast<BatchNorm&>(*bn).config().eps;
      for (int64_t c = 0; c < cout; ++c) {
        const double s = gamma[c] / std::sqrt(var[c] + eps);
        for (int64_t j = 0; j < per; ++j) wv[c * per + j] *= s;
        bv[c] = (bv[c] - mean[c]) * s + beta[c];
      }
      ++info.folded_bn;
    }
    H5Group g = open_node(l);
    g.write("weight", tensor_of(wv, w.shape(), w.dtype()));
    if (l.type() == "linear") {
      if (in.size() != 1) inexpressible(m_, l, "acts on per-sample input " + shape_str(in) + " (NIR's Affine takes vectors)");
      write_strings(g, "type", {b || bn ? "Affine" : "Linear"}, {});
      if (b || bn) g.write("bias", tensor_of(bv, {cout}, w.dtype()));
      return;
    }
    const Conv2dConfig& c = dynamic_cast<Conv2d&>(l).config();
    write_strings(g, "type", {"Conv2d"}, {});
    g.write("bias", tensor_of(bv, {cout}, w.dtype()));
    write_i64(g, "stride", {c.stride, c.stride});
    write_i64(g, "padding", {c.padding, c.padding});
    write_i64(g, "dilation", {1, 1});
    write_i64(g, "groups", {1}, true);
    write_i64(g, "input_shape", {in.at(1), in.at(2)});
  }

  void neuron_node(const H5Group& g, Neuron& n, const Shape& shape) {
    const NeuronConfig& c = n.config();
    if (!c.hard_reset)
      inexpressible(m_, n, "resets softly (v_reset = None); NIR neurons reset to v_reset: use a hard reset");
    if (c.kind == NeuronKind::IF) {
      write_strings(g, "type", {"IF"}, {});
      write_full(g, "r", shape, 1.0 / dt_);
    } else {
      double tau = c.tau;
      if (c.kind == NeuronKind::PLIF) tau = 1.0 + std::exp(-named(n.params(), "w")->at(0));  // 1 / sigmoid(w)
      write_strings(g, "type", {"LIF"}, {});
      write_full(g, "tau", shape, tau * dt_);
      write_full(g, "r", shape, c.decay_input ? 1.0 : tau);
      write_full(g, "v_leak", shape, c.v_reset);
    }
    write_full(g, "v_threshold", shape, c.v_threshold);
    write_full(g, "v_reset", shape, c.v_reset);
  }

  Model& m_;
  H5Group nodes_;
  double dt_;
};

}  // namespace

NirExportInfo write_nir_graph(Model& model, const std::string& out, double dt, const std::string& source) {
  if (!(dt > 0) || !std::isfinite(dt)) SM_INPUT_ERROR("--nir-dt must be a positive time step in seconds, got " << dt);
  std::vector<Leaf> leaves;
  Shape shape = model.info.input_shape;
  for (auto& u : model.units) collect_leaves(model, *u, shape, leaves);
  const std::string tmp = out + ".tmp";
  NirExportInfo info;
  try {
    H5File f = H5File::create(tmp);
    write_strings(f, "version", {kNirVersion}, {});
    {  // every group closes before the file
    H5Group node = f.require_group("/node");
    write_strings(node, "type", {"NIRGraph"}, {});
    {
      GraphWriter gw(model, node.require_group("nodes"), dt);
      H5Group in = gw.open_node("input");
      write_strings(in, "type", {"Input"}, {});
      write_i64(in, "shape", model.info.input_shape);
      for (size_t i = 0; i < leaves.size();) i = gw.map(leaves, i);
      H5Group o = gw.open_node("output");
      write_strings(o, "type", {"Output"}, {});
      write_i64(o, "shape", shape);
      std::vector<std::string> edges;
      for (size_t i = 0; i + 1 < gw.chain_.size(); ++i) {
        edges.push_back(gw.chain_[i]);
        edges.push_back(gw.chain_[i + 1]);
      }
      write_strings(node, "edges", edges, {static_cast<int64_t>(edges.size() / 2), 2});
      info = gw.info;
    }
    H5Group meta = node.require_group("metadata");
    write_strings(meta, "producer", {"spikemesh"}, {});
    write_strings(meta, "model", {model.info.name}, {});
    write_strings(meta, "source", {source}, {});
    meta.write("dt", Tensor::full({}, dt, DType::F64));
    }
    f.flush();
    f.close();
  } catch (const Error&) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    SM_INPUT_ERROR(out << ": cannot write the NIR graph (rename from " << tmp << " failed)");
  }
  return info;
}

}  // namespace sm
