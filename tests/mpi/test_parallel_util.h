// test_parallel_util.h — shared pieces of the data-parallel MPI tests (test_parallel_*.cpp):
// small models (fmnist_csnn at C=4, a tiny CIFAR10-DVS-like VGG, a BN-free variant), a
// deterministic synthetic batch generator keyed by (step, global sample index) so any dp
// slice of a global batch is generated directly, and the single-rank reference trajectory
// (train_step on the whole global batch, no communication at all) every layout is compared
// with.
#pragma once
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "mpi_test_env.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/models/model.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/train/train_step.h"

namespace sm::test {

// A scratch directory with the same path on every rank (made by rank 0). Collective.
inline const std::string& scratch_dir() {
  static std::string dir = [] {
    char buf[256] = {0};
    if (world_rank() == 0) {
      std::snprintf(buf, sizeof buf, "/tmp/sm_partest_%d", static_cast<int>(getpid()));
      std::system((std::string("rm -rf ") + buf + " && mkdir -p " + buf).c_str());
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, world());
    return std::string(buf);
  }();
  return dir;
}

// Model specs written into the scratch dir (rank 0) once per name, returned as paths.
// Collective on the first call for a name (never rewritten: other ranks may be reading it).
inline std::string write_spec(const std::string& name, const std::string& text) {
  static std::set<std::string> written;
  const std::string path = scratch_dir() + "/" + name + ".toml";
  if (written.insert(name).second) {
    if (world_rank() == 0) std::ofstream(path) << text;
    MPI_Barrier(world());
  }
  return path;
}

// A CIFAR10-DVS-shaped VGG at toy size: events [2, 16, 16], T 3, conv-BN-LIF blocks, an
// avg-pool unit without parameters, dropout and a linear classifier (mean_ce). The convs have
// no bias when followed by BN: BN cancels a conv bias, so its gradient is pure rounding noise
// (~1e-17) which Adam normalises into full-size steps of random sign — such a parameter has
// no effect on the loss but differs between any two summation orders.
inline std::string tiny_dvs_spec(bool batchnorm) {
  std::string bn1 = batchnorm ? "  { type = \"batchnorm2d\", name = \"proj_bn.1\", num_features = 8 },\n" : "";
  std::string bn2 = batchnorm ? "  { type = \"batchnorm2d\", name = \"proj_bn.2\", num_features = 8 },\n" : "";
  std::string name = batchnorm ? "tiny_dvs" : "tiny_dvs_nobn";
  return write_spec(name,
                    "[model]\nname = \"" + name +
                        "\"\ninput = [2, 16, 16]\nnum_classes = 10\nT = 3\nloss = \"mean_ce\"\n"
                        "input_kind = \"events\"\n\n"
                        "[neurons.lif]\ntype = \"lif\"\ntau = 1.333\ndecay_input = false\nv_threshold = 1.0\n"
                        "v_reset = 0.0\ndetach_reset = true\nsurrogate = \"atan\"\n\n"
                        "[[unit]]\nname = \"features.0\"\nlayers = [\n"
                        "  { type = \"conv2d\", name = \"proj_bn.0\", in_channels = 2, out_channels = 8, kernel_size = 3, "
                        "padding = 1, init = \"kaiming_normal_fan_out\"" + std::string(batchnorm ? ", bias = false" : "") + " },\n" +
                        bn1 +
                        "  { type = \"neuron\", name = \"neuron\", neuron = \"lif\" },\n]\n\n"
                        "[[unit]]\nname = \"features.1\"\nlayers = [\n"
                        "  { type = \"avgpool2d\", name = \"proj_bn.0\", kernel_size = 2 },\n"
                        "  { type = \"conv2d\", name = \"proj_bn.1\", in_channels = 8, out_channels = 8, kernel_size = 3, "
                        "padding = 1, init = \"kaiming_normal_fan_out\"" + std::string(batchnorm ? ", bias = false" : "") + " },\n" +
                        bn2 +
                        "  { type = \"neuron\", name = \"neuron\", neuron = \"lif\" },\n]\n\n"
                        "[[unit]]\nname = \"features.2\"\nlayers = [\n"
                        "  { type = \"avgpool2d\", name = \"\", kernel_size = 2 },\n]\n\n"
                        "[[unit]]\nname = \"classifier\"\nlayers = [\n"
                        "  { type = \"flatten\", name = \"flatten\" },\n"
                        "  { type = \"dropout\", p = 0.25 },\n"
                        "  { type = \"linear\", in_features = 128, out_features = 10 },\n]\n");
}

// An 8-unit VGG-like model (events [2, 8, 8], T 2) for pp 4 x 2 virtual stages: conv-BN-LIF
// units, an avg-pool unit, a max-pool unit (spikes stay spikes), a BN-free conv unit and the
// classifier.
inline std::string deep_spec() {
  auto block = [](const std::string& name, int in, bool bn) {
    return "[[unit]]\nname = \"" + name + "\"\nlayers = [\n  { type = \"conv2d\", name = \"conv\", in_channels = " +
           std::to_string(in) + ", out_channels = 4, kernel_size = 3, padding = 1" + (bn ? ", bias = false" : "") +
           " },\n" + (bn ? "  { type = \"batchnorm2d\", name = \"bn\", num_features = 4 },\n" : "") +
           "  { type = \"neuron\", name = \"neuron\", neuron = \"lif\" },\n]\n\n";
  };
  return write_spec("deep8",
                    "[model]\nname = \"deep8\"\ninput = [2, 8, 8]\nnum_classes = 10\nT = 2\nloss = \"mean_ce\"\n"
                    "input_kind = \"events\"\n\n"
                    "[neurons.lif]\ntype = \"lif\"\ntau = 2.0\ndecay_input = true\nv_threshold = 0.5\n"
                    "v_reset = 0.0\ndetach_reset = true\nsurrogate = \"atan\"\n\n" +
                        block("f.0", 2, true) + block("f.1", 4, true) +
                        "[[unit]]\nname = \"f.2\"\nlayers = [\n  { type = \"avgpool2d\", kernel_size = 2 },\n]\n\n" +
                        block("f.3", 4, true) +
                        "[[unit]]\nname = \"f.4\"\nlayers = [\n  { type = \"maxpool2d\", kernel_size = 2 },\n]\n\n" +
                        block("f.5", 4, true) + block("f.6", 4, false) +
                        "[[unit]]\nname = \"classifier\"\nlayers = [\n  { type = \"flatten\", name = \"flatten\" },\n"
                        "  { type = \"linear\", in_features = 16, out_features = 10 },\n]\n");
}

// "csnn": fmnist_csnn at C=4 (static [1, 28, 28], T 4, rate_mse); "dvs": tiny_dvs_spec(true);
// "nobn": tiny_dvs_spec(false); "sformer": spikformer_cifar at E 16, 2 heads, 1 block, 8 px,
// 1 channel, T 2; "deep": deep_spec(). Built, not finalised (tensor parallelism shards it first).
inline std::unique_ptr<Model> build_spec_model(const std::string& which, double dropout = 0.0) {
  ModelSelection sel;
  if (which == "csnn") {
    sel.model = "fmnist_csnn";
    sel.vars = {"C=4"};
  } else if (which == "sformer") {
    sel.model = "spikformer_cifar";
    sel.vars = {"E=16", "heads=2", "depth=1", "image_size=8", "in_channels=1", "num_classes=10"};
    sel.T = 2;
  } else if (which == "deep") {
    sel.spec = deep_spec();
  } else {
    sel.spec = tiny_dvs_spec(which == "dvs");
  }
  sel.dropout = dropout;
  return sel.build();
}

// build_spec_model finalised in `dt` from `seed` on `dev`.
inline std::unique_ptr<Model> build_model(const std::string& which, DType dt, uint64_t seed = 7,
                                          double dropout = 0.0, Device dev = Device::cpu()) {
  auto m = build_spec_model(which, dropout);
  m->finalize(dt, dev, seed);
  return m;
}

// This rank's GPU (GPU world rank % visible: the tests run on one node), or the CPU when none.
inline Device test_gpu() {
  return cuda_device_count() > 0 ? select_device(DeviceRequest::Cuda, world_rank()) : Device::cpu();
}

// A host micro-batch on `dev` (no-op for the CPU).
inline MicroBatch on_device(MicroBatch b, const Device& dev) {
  if (dev.is_cpu()) return b;
  b.x = b.x.to(dev);
  b.y = b.y.to(dev);
  return b;
}

// Samples [first, first + n) of the global batch of `step`: x [T, n, ...input], y [n].
// Element values depend only on (step, global sample, element): any slicing agrees.
inline MicroBatch synth_batch(const Model& m, int64_t step, int64_t first, int64_t n, DType dt) {
  const int T = m.info.T;
  const bool events = m.info.input_kind == "events";
  int64_t per = 1;
  for (int64_t d : m.info.input_shape) per *= d;
  Shape xs{T, n};
  for (int64_t d : m.info.input_shape) xs.push_back(d);
  MicroBatch b;
  b.x = Tensor::empty(xs, dt);
  b.y = Tensor::empty({n}, DType::I64);
  b.sample_offset = first;
  const CounterRng rng(1234, "parallel-test-data");
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t g = static_cast<uint64_t>(first + i);
    b.y.data<int64_t>()[i] = static_cast<int64_t>(rng.uniform(g, static_cast<uint32_t>(step), 99) * 10) % 10;
    for (int t = 0; t < T; ++t)
      for (int64_t e = 0; e < per; ++e) {
        const uint64_t key = static_cast<uint64_t>(e) * 8 + (events ? static_cast<uint64_t>(t) : 0);
        double v = rng.uniform(key, static_cast<uint32_t>(step), static_cast<uint32_t>(g));
        if (events) v = v < 0.3 ? 1.0 : 0.0;
        const int64_t at = (static_cast<int64_t>(t) * n + i) * per + e;
        if (dt == DType::F64)
          b.x.data<double>()[at] = v;
        else
          b.x.data<float>()[at] = static_cast<float>(v);
      }
  }
  return b;
}

inline OptimizerConfig test_optimizer(const std::string& name = "adam") {
  OptimizerConfig oc;
  oc.name = name;
  oc.lr = name == "sgd" ? 0.05 : 0.01;
  oc.momentum = 0.9;
  oc.weight_decay = 1e-4;
  return oc;
}

// Every parameter value, in order, flattened to doubles.
inline std::vector<double> flat_params(Model& m) {
  std::vector<double> out;
  for (Param* p : m.params()) {
    const Tensor v = p->value.to(Device::cpu());
    for (int64_t i = 0; i < v.numel(); ++i) out.push_back(v.at(i));
  }
  return out;
}

struct Trajectory {
  std::vector<double> losses;   // per optimizer step (mean over the global batch)
  std::vector<double> params;   // final parameter values
  double eval_loss = 0;         // eval-mode loss on a fresh global batch after the last step
  int64_t eval_correct = -1;
  std::vector<double> firing;   // every layer's stat (firing rate) after the last step, model order
};

// layout.layer_stats() as values, averaged over the dp replicas (equal sample shares, so the
// mean of their rates is the global batch's). Collective over the world's dp, tp and pp groups.
inline std::vector<double> firing_over_replicas(Layout& layout, Comm* dp) {
  std::vector<double> v;
  for (const LayerStat& s : layout.layer_stats()) v.push_back(s.value);
  if (dp && dp->size() > 1) {
    all_reduce_doubles(*dp, v, ReduceOp::Sum);
    for (double& x : v) x /= dp->size();
  }
  return v;
}

// The single-rank trajectory: `steps` optimizer steps on global batches of `global` samples
// (split into `accum` micro-batches when accum > 1), no communication.
inline Trajectory reference_run(const std::string& which, DType dt, int steps, int64_t global,
                                const OptimizerConfig& oc, int accum = 1, double dropout = 0.0,
                                double clip_norm = 0.0, Device dev = Device::cpu()) {
  auto m = build_model(which, dt, 7, dropout, dev);
  // one rank: no communication at all
  Layout layout(*m, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, *m));
  auto opt = make_optimizer(oc, layout.optimizer_params());
  Trajectory tr;
  for (int s = 0; s < steps; ++s) {
    Ctx ctx;
    ctx.seed = 11;
    ctx.step = s;
    std::vector<MicroBatch> micro;
    for (int k = 0; k < accum; ++k)
      micro.push_back(on_device(synth_batch(*m, s, k * global / accum, global / accum, dt), dev));
    StepOptions so;
    so.clip_norm = clip_norm;
    tr.losses.push_back(train_step(layout, *opt, micro, ctx, so).loss);
  }
  tr.params = flat_params(*m);
  tr.firing = firing_over_replicas(layout, nullptr);
  Ctx ctx;
  const MicroBatch e = on_device(synth_batch(*m, steps, 0, global, dt), dev);  // [T, global, ...]
  const StepResult r = eval_step(layout, e.x, e.y, ctx);
  tr.eval_loss = r.loss;
  tr.eval_correct = r.correct;
  return tr;
}

// The part of the one-rank parameters (flat, full shapes, in order) that `params` (local
// shards of the same model, in the same order) hold, flattened in the same order. With
// `skip_missing` (pipelines), Params without storage here (other stages' units) are skipped.
inline std::vector<double> matching_part(const std::vector<Param*>& params, const std::vector<double>& full,
                                         bool skip_missing = false) {
  std::vector<double> out;
  size_t base = 0;
  for (const Param* p : params) {
    const Shape& g = p->shape;
    const Shape& l = p->local_shape;
    if (skip_missing && !p->value.defined()) {
      base += static_cast<size_t>(shape_numel(g));
      continue;
    }
    const int d = p->shard.sharded() ? p->shard.dim : -1;
    int64_t inner = 1;
    if (d >= 0)
      for (size_t k = d + 1; k < l.size(); ++k) inner *= l[k];
    const int64_t n = shape_numel(l);
    for (int64_t i = 0; i < n; ++i) {
      int64_t gi = i;
      if (d >= 0) {  // blocks (segments) along d, each split over tp: rank index holds piece index of each
        const int64_t outer = i / (inner * l[d]), at = (i / inner) % l[d], in = i % inner;
        const int64_t ls = l[d] / p->shard.segments, gs = g[d] / p->shard.segments;
        const int64_t row = (at / ls) * gs + p->shard.index * ls + at % ls;
        gi = (outer * g[d] + row) * inner + in;
      }
      out.push_back(full[base + static_cast<size_t>(gi)]);
    }
    base += static_cast<size_t>(shape_numel(g));
  }
  return out;
}

// Every parameter value held here (Params with storage), in order, flattened to doubles.
inline std::vector<double> held_params(Model& m) {
  std::vector<double> out;
  for (Param* p : m.params()) {
    if (!p->value.defined()) continue;
    const Tensor v = p->value.to(Device::cpu());
    for (int64_t i = 0; i < v.numel(); ++i) out.push_back(v.at(i));
  }
  return out;
}

inline double rel_diff(double a, double b) { return std::fabs(a - b) / std::max(1e-30, std::max(std::fabs(a), std::fabs(b))); }

inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double scale = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    d = std::max(d, std::fabs(a[i] - b[i]));
  }
  return d / std::max(scale, 1e-30);
}

}  // namespace sm::test
