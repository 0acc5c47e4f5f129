// run_header.h — the opening lines of a training run's log: what runs (model, data, batch
// arithmetic, device, ranks, output) and where each rank runs. Pure apart from the placement's
// gather, which is collective over the mesh's world.
#pragma once
#include <string>

#include "spikemesh/core/device.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/run_setup.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/train_plan.h"

namespace sm {

class Mesh;

// "spikemesh train: model ... (N parameters, T, precision), data ..., batch ..., steps/epoch,
// device or threads, ranks and layout, output DIR".
std::string header_line(const TrainConfig& cfg, const H5Dataset& ds, Layout& layout, const RunParts& parts,
                        const TrainPlan& plan, const std::string& run_dir);

// "placement:" and one line per rank: its GPU ("cuda:0 (CUDA_VISIBLE_DEVICES=3)") or its CPU
// threads plus the GPUs Slurm bound. Collective over mesh.world().
std::string placement_lines(Mesh& mesh, const Device& device);

}  // namespace sm
