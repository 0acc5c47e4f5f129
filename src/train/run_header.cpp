// run_header.cpp — the opening lines of a training run's log (run_header.h).
#include "spikemesh/train/run_header.h"

#include <omp.h>

#include <cstdlib>
#include <sstream>

#include "spikemesh/comm/mesh.h"
#include "spikemesh/models/model.h"

namespace sm {

std::string header_line(const TrainConfig& cfg, const H5Dataset& ds, Layout& layout, const RunParts& parts,
                        const TrainPlan& plan, const std::string& run_dir) {
  const Model& m = *parts.model;
  const int dp = layout.groups().data_size();
  std::ostringstream h;
  h << "spikemesh train: model " << m.info.name << " (" << m.num_parameters() << " parameters, T " << m.info.T << ", "
    << cfg.precision << "), data " << cfg.data << " (" << ds.size(Split::Train) << " train / " << ds.size(Split::Test)
    << " test), batch " << plan.batch;
  if (layout.pipeline())
    h << " per microbatch (global " << plan.global_batch << " = " << plan.batch << " x dp " << dp << " x "
      << plan.accum << " microbatches)";
  else if (layout.groups().distributed() || plan.accum > 1)
    h << " per rank (global " << plan.global_batch << " = " << plan.batch << " x dp " << dp << " x accum "
      << plan.accum << ")";
  h << ", " << plan.per_epoch << " steps/epoch, ";
  if (parts.device.is_cuda())
    h << parts.device.str()
      << (parts.activations != parts.dtype ? std::string(" (") + dtype_name(parts.activations) + " activations)" : "");
  else
    h << omp_get_max_threads() << " threads";
  if (layout.groups().distributed())
    h << " per rank, " << layout.groups().world_size() << " ranks (" << layout.describe() << ")";
  if (plan.augment) h << ", augment " << plan.augment->spec().canonical_text();
  h << ", output " << run_dir;
  return h.str();
}
std::string placement_lines(Mesh& mesh, const Device& device) {
  // "cuda:0 (CUDA_VISIBLE_DEVICES=3)"; on the CPU "2 threads", plus the GPUs Slurm bound
  // when this rank runs on the CPU anyway (fp64, --device cpu, or no usable GPU).
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string bound = cvd && *cvd ? std::string(" (CUDA_VISIBLE_DEVICES=") + cvd + ")" : "";
  std::string mine;
  if (device.is_cuda()) {
    mine = device.str() + bound;
  } else {
    const int t = omp_get_max_threads();
    mine = std::to_string(t) + (t == 1 ? " thread" : " threads") + bound;
  }
  std::string where = mesh.placement(mine);  // collective over the world
  where.pop_back();
  return "placement:\n" + where;
}

}  // namespace sm
