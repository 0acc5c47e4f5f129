// cmd_dump.cpp — `spikemesh dump-grads`: the PyTorch parity hook (tests/parity/) and a
// debugging aid. On ONE rank, CPU, with a fixed batch from an HDF5 file:
//   /params/<name>, /buffers/<name>   the initial state dict (full logical shapes; each param
//                                     dataset has an int attribute weight_decay 0/1)
//   /output0 [T,N,K], /loss0 (f64)    the first training-mode forward and its loss
//   /grads/<name>                     d loss0 / d param after one backward
//   /buffers_after/<name>             BN running statistics after that forward
//   /losses [K]                       K optimizer steps on the same batch (each: reset_state,
//                                     zero_grad, forward, loss, backward, step); the loss of
//                                     each step BEFORE its update
//   /output_last [T,N,K]              the output of the K-th step's forward (only when K > 0)
//   /params_final, /buffers_final     state after the K steps (only when K > 0)
// Root attributes: format, model, loss, precision, T, seed, steps, optimizer, lr, momentum,
// weight_decay. Input: /x float [N, T, ...per-sample...] (dataset layout, docs/architecture.md §3)
// or [N, ...per-sample...] (a static input, repeated over T), /y int [N].
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "spikemesh/app/commands.h"
#include "spikemesh/app/model_options.h"
#include "spikemesh/core/error.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/models/model.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/core/flag_ranges.h"

namespace sm {

namespace {

struct DumpOptions {
  ModelSelection selection;
  std::string input, output;
  std::string precision = "fp64";
  uint64_t seed = 1;
  int steps = 0;
  OptimizerConfig optimizer;
};

// x in the dataset layout [N, T, ...] (or [N, ...] static) -> time-major [T, N, ...].
Tensor to_time_major(const Tensor& x, const Shape& sample_shape, int T, const std::string& where) {
  const int sample_dims = static_cast<int>(sample_shape.size());
  const bool static_input = x.ndim() == sample_dims + 1;
  if (x.ndim() != sample_dims + 2 && !static_input)
    SM_INPUT_ERROR(where << " has shape " << shape_str(x.shape()) << "; expected [N, T, "
                         << shape_str(sample_shape).substr(1) << " or [N, " << shape_str(sample_shape).substr(1));
  const int first_sample_dim = static_input ? 1 : 2;
  Shape got(x.shape().begin() + first_sample_dim, x.shape().end());
  if (got != sample_shape)
    SM_INPUT_ERROR(where << " has per-sample shape " << shape_str(got) << " but the model expects "
                         << shape_str(sample_shape));
  if (!static_input && x.dim(1) != T)
    SM_INPUT_ERROR(where << " has T = " << x.dim(1) << " time steps but the model runs T = " << T
                         << " (pass --T " << x.dim(1) << ")");
  const int64_t N = x.dim(0);
  const int64_t sample = shape_numel(sample_shape);
  const size_t bytes = static_cast<size_t>(sample) * dtype_size(x.dtype());
  Shape out_shape{T, N};
  out_shape.insert(out_shape.end(), sample_shape.begin(), sample_shape.end());
  Tensor out = Tensor::empty(out_shape, x.dtype());  // [T, N, ...]
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      int64_t from = static_input ? n : n * T + t;
      std::memcpy(dst + (t * N + n) * bytes, src + from * bytes, bytes);
    }
  return out;
}

void write_params(const H5Group& g, Model& model, bool values) {
  for (Param* p : model.params()) {
    SM_CHECK(p->local_shape == p->shape, "dump-grads needs unsharded params: " << p->name);
    g.write(p->name, values ? p->value : p->grad);
    if (values) g.set_attr_on(p->name, "weight_decay", static_cast<int64_t>(p->weight_decay ? 1 : 0));
  }
}

void write_buffers(const H5Group& g, Model& model) {
  for (Buffer* b : model.buffers()) g.write(b->name, b->value);
}

// One training step's forward, loss and backward; returns the loss (before any update).
double forward_backward(Model& model, const Tensor& x, const Tensor& y, Ctx& ctx, Tensor* out_keep) {
  model.reset_state();
  model.zero_grad();
  Tensor out = model.forward(x, ctx);  // [T, N, K]
  LossResult r = model.loss->forward(out, y);
  Tensor dy = model.loss->backward(1.0);  // [T, N, K]
  model.backward(dy, ctx);
  if (out_keep) *out_keep = out;
  return r.loss;
}

void run_dump(const DumpOptions& o, const AppEnv& env) {
  if (env.size > 1) SM_INPUT_ERROR("dump-grads runs on one rank; start it without mpirun -np " << env.size);
  const DType dt = o.precision == "fp64" ? DType::F64 : DType::F32;

  std::unique_ptr<Model> model = o.selection.build();
  model->finalize(dt, Device::cpu(), o.seed);
  const int T = model->info.T;

  H5File in = H5File::open(o.input);
  Tensor x_data = in.read("x", dt);           // [N, T, ...] or [N, ...]
  Tensor y = in.read("y", DType::I64);        // [N]
  if (y.ndim() != 1 || x_data.ndim() < 1 || x_data.dim(0) != y.dim(0))
    SM_INPUT_ERROR(o.input << ": /y must be [N] with N = /x's first dim; got /x " << shape_str(x_data.shape())
                           << ", /y " << shape_str(y.shape()));
  for (int64_t i = 0; i < y.numel(); ++i) {
    int64_t label = y.data<int64_t>()[i];
    if (label < 0 || label >= model->info.num_classes)
      SM_INPUT_ERROR(o.input << ": /y[" << i << "] = " << label << " is not a class of " << model->info.name
                             << " (0.." << model->info.num_classes - 1 << ")");
  }
  Tensor x = to_time_major(x_data, model->info.input_shape, T, o.input + ":/x");  // [T, N, ...]

  H5File out = H5File::create(o.output);
  out.set_attr("format", "spikemesh dump-grads 1");
  out.set_attr("model", model->info.name);
  out.set_attr("loss", model->info.loss);
  out.set_attr("precision", o.precision);
  out.set_attr("T", static_cast<int64_t>(T));
  out.set_attr("seed", static_cast<int64_t>(o.seed));
  out.set_attr("steps", static_cast<int64_t>(o.steps));
  out.set_attr("optimizer", o.optimizer.name);
  out.set_attr("lr", o.optimizer.lr);
  out.set_attr("momentum", o.optimizer.momentum);
  out.set_attr("weight_decay", o.optimizer.weight_decay);
  write_params(out.require_group("params"), *model, true);
  write_buffers(out.require_group("buffers"), *model);

  Ctx ctx;
  ctx.training = true;
  ctx.seed = o.seed;
  ctx.step = 0;
  Tensor out0;
  const double loss0 = forward_backward(*model, x, y, ctx, &out0);
  out.write("loss0", Tensor::full({}, loss0, DType::F64));
  out.write("output0", out0);
  write_params(out.require_group("grads"), *model, false);
  write_buffers(out.require_group("buffers_after"), *model);
  std::printf("%s %s: loss0 %.12g\n", model->info.name.c_str(), o.precision.c_str(), loss0);

  if (o.steps > 0) {
    std::unique_ptr<Optimizer> opt = make_optimizer(o.optimizer, model->params());
    Tensor losses = Tensor::empty({o.steps}, DType::F64);  // [K]
    Tensor out_last;                                       // [T, N, K]
    for (int k = 0; k < o.steps; ++k) {
      ctx.step = k;
      losses.data<double>()[k] = forward_backward(*model, x, y, ctx, &out_last);
      opt->step();
      std::printf("step %d: loss %.12g\n", k, losses.data<double>()[k]);
    }
    out.write("losses", losses);
    out.write("output_last", out_last);
    write_params(out.require_group("params_final"), *model, true);
    write_buffers(out.require_group("buffers_final"), *model);
  }
  out.flush();
  std::fflush(stdout);
}

}  // namespace

void add_dump_grads_command(CLI::App& app, const AppEnv& env) {
  auto o = std::make_shared<DumpOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dump-grads", "run one batch forward/backward and K optimizer steps, writing state, output, loss "
                    "and gradients to HDF5 (one rank, CPU; the PyTorch parity hook)");
  cmd->footer(
      "Input file: /x float [N, T, ...per-sample...] (or [N, ...] for a static input repeated over T),\n"
      "            /y int [N] class labels.\n"
      "Output file: /params, /buffers (initial state dict), /output0 [T,N,K], /loss0, /grads,\n"
      "             /buffers_after (BN running stats after the first forward), /losses [K],\n"
      "             /output_last (the last step's output), /params_final, /buffers_final.\n"
      "Examples:\n"
      "  spikemesh dump-grads --model fmnist_csnn --var C=8 --T 4 --dropout 0 --input in.h5 \\\n"
      "      --out grads.h5 --precision fp64 --steps 5 --optimizer sgd --lr 0.1 --momentum 0.9\n"
      "  spikemesh dump-grads --model cifar10dvs_vgg --T 4 --dropout 0 --input dvs_in.h5 --out vgg_grads.h5\n"
      "(tests/parity/torch_parity.py writes such inputs and compares the output with PyTorch.)");
  add_model_options(*cmd, o->selection);
  cmd->add_option("--input", o->input, "input batch (HDF5: /x, /y)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", o->output, "output HDF5 file (overwritten)")->required();
  cmd->add_option("--precision", o->precision, "parameter and compute precision")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "fp64"}));
  cmd->add_option("--seed", o->seed, "parameter-initialisation seed")->capture_default_str()
      ->check(range_validator("seed", true));
  cmd->add_option("--steps", o->steps, "optimizer steps on the same batch after the first dump")
      ->capture_default_str()
      ->check(range_validator("steps", true));
  cmd->add_option("--optimizer", o->optimizer.name, "optimizer for the steps")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  cmd->add_option("--lr", o->optimizer.lr, "learning rate")->capture_default_str()
      ->check(range_validator("lr", false));
  cmd->add_option("--momentum", o->optimizer.momentum, "SGD momentum")->capture_default_str()
      ->check(range_validator("momentum", false));
  cmd->add_option("--weight-decay", o->optimizer.weight_decay, "weight decay (L2 for sgd/adam, decoupled for adamw)")
      ->capture_default_str()
      ->check(range_validator("weight-decay", false));
  cmd->callback([o, &env]() { run_dump(*o, env); });
}

}  // namespace sm
