// run_setup.cpp — device choice, model, layout, optimizer and scaler of a run (run_setup.h).
#include "spikemesh/train/run_setup.h"

#include <omp.h>

#include <cstdlib>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/kernels/spike_conv_choice.h"
#include "spikemesh/models/model.h"

namespace sm {

RunParts::RunParts() = default;
RunParts::~RunParts() = default;
RunParts::RunParts(RunParts&&) noexcept = default;
RunParts& RunParts::operator=(RunParts&&) noexcept = default;

namespace {
// Several ranks: main.cpp already divided the node's cores among its ranks.
void configure_threads(int64_t threads, bool multi_rank) {
  int n = static_cast<int>(threads);
  if (n == 0 && std::getenv("OMP_NUM_THREADS") == nullptr && !multi_rank) n = omp_get_num_procs();
  if (n > 0) omp_set_num_threads(n);
}
}  // namespace

RunParts setup_run(const RunRequest& req, Mesh* mesh, const std::function<void(Model&)>& check_model) {
  Comm* world = mesh ? &mesh->world() : nullptr;
  RunParts parts;
  // The device: rank r of a node takes GPU local_rank % visible (--device cuda, or auto when
  // one is visible); fp64, the exact reference, runs on the CPU.
  agree_on_error(world, [&] {
    parts.precision = precision_from_name(req.precision);
    DeviceRequest dr = device_request_from_name(req.device);
    if (dr == DeviceRequest::Auto && parts.precision == Precision::FP64) dr = DeviceRequest::Cpu;
    if (dr == DeviceRequest::Auto && (parts.precision == Precision::BF16 || parts.precision == Precision::FP16) &&
        cuda_device_count() == 0)
      SM_INPUT_ERROR("--precision " << req.precision << " needs a GPU (" << cuda_unavailable_reason()
                                    << "); the CPU runs fp32 or fp64");
    parts.device = select_device(dr, mesh ? mesh->local_rank() : 0);
    check_precision_for_device(parts.precision, parts.device);
  });
  configure_threads(req.threads, mesh != nullptr);
  if (!req.conv_algo.empty()) set_spike_conv_algo(spike_conv_algo_from_name(req.conv_algo, "--conv-algo"));
  parts.dtype = master_dtype(parts.precision);
  parts.activations = activation_dtype(parts.precision);
  std::string model_text;  // the whole model as built (before tp sharding): the same on every rank
  LayoutPlan plan = req.layout;
  agree_on_error(world, [&] {
    parts.model = req.model.build();
    model_text = parts.model->summary();
    if (check_model) check_model(*parts.model);
    bind_layout_plan(plan, *parts.model);  // the tp plan, the pipeline's schedule (a file read on every rank)
    if (plan.mesh.tp > 1) apply_tp_plan(plan.tp, mesh->tp().rank());  // shard before the parameters exist
    make_optimizer(req.optimizer, {});  // validates the hyper-parameters before any state exists
  });
  // A spec file that differs between ranks (a relative --model-spec in another working
  // directory) would give the layout's collectives different sizes: refused before any.
  if (world)
    check_same_text(*world, model_text,
                    "the model built from --model/--model-spec and --var (the same spec file on every rank?)");
  parts.model->finalize(parts.dtype, parts.device, req.seed);
  plan.options.activations = parts.activations;  // pp unit costs measured in the run's activation dtype
  parts.layout = std::make_unique<Layout>(*parts.model, mesh, std::move(plan));  // collective over the world
  // CUDA holders (the model's or the layout's device shards) get the fused device optimizers.
  parts.optimizer = make_optimizer(req.optimizer, parts.layout->optimizer_params());
  parts.scaler = LossScaler::for_precision(parts.precision);  // dynamic for fp16 only
  return parts;
}

}  // namespace sm
