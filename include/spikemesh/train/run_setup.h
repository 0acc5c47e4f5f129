// run_setup.h — what every run builds before its loop, by ONE function that `train` and
// `bench` share: the device, the model (built, checked, finalised on the device), the Layout
// over the mesh, the optimizer over the layout's holders and the loss scaler.
// Invariant: every check that can fail on some ranks only (no GPU, a bad spec, a caller's
// model check, bad optimizer settings) is agreed over the mesh's world before any
// communicator, GPU or file work, so every rank fails with rank 0's one message.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "spikemesh/core/device.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

class Mesh;
class Model;

struct RunRequest {
  ModelSelection model;
  std::string precision = "fp32";  // fp32 | fp64 | bf16 | fp16
  std::string device = "auto";     // auto | cpu | cuda
  int64_t threads = 0;             // CPU threads per rank; 0: OMP_NUM_THREADS, else all cores alone
  std::string conv_algo;           // dense | sparse | auto; empty: SPIKEMESH_CONV_ALGO, else auto
  uint64_t seed = 1;               // initial weights
  LayoutPlan layout;  // the command's plan (phase 1, resolved at its top); setup_run binds it to the model
  OptimizerConfig optimizer;
};

struct RunParts {
  Precision precision = Precision::FP32;
  Device device = Device::cpu();
  DType dtype = DType::F32;       // parameters, gradients, optimizer state
  DType activations = DType::F32; // activations (= dtype on the CPU)
  std::unique_ptr<Model> model;
  std::unique_ptr<Layout> layout;
  std::unique_ptr<Optimizer> optimizer;
  LossScaler scaler = LossScaler::for_precision(Precision::FP32);
  ~RunParts();
  RunParts();
  RunParts(RunParts&&) noexcept;
  RunParts& operator=(RunParts&&) noexcept;
};

// Builds the parts. `check_model` (may be empty) sees the built, unfinalised model and throws
// Input errors (e.g. dataset shape mismatches); it runs in the agreed block. Collective over
// mesh->world() (mesh null: one rank, no MPI call).
RunParts setup_run(const RunRequest& req, Mesh* mesh, const std::function<void(Model&)>& check_model = {});

}  // namespace sm
