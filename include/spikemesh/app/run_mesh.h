// run_mesh.h — what `train` and `eval` share between parsing and running: the configuration
// resolved and agreed over the world, and the process mesh its layout flags describe.
// Invariant: with several ranks both are collective over env.world and every check that can
// fail is agreed first (one message from rank 0, every rank exits 1), so ranks started with
// different flags or files stop with that message instead of hanging in a collective.
#pragma once
#include <functional>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/train/train_config.h"

namespace sm {

class Mesh;

// Runs `resolve` (throws Input errors) on every rank under collective_check over env.world, then
// compares the resolved configuration `resolver.to_toml()` over the world. One rank: just `resolve`.
void resolve_agreed(const AppEnv& env, const TrainConfigResolver& resolver, const std::function<void()>& resolve);

// Checks c's mesh flags against the world size (also on one rank: a flag that cannot apply is an
// error, never ignored), resolves the run's layout plan (`plan`: training_layout_plan, before any
// communicator) and creates the mesh when there are several ranks or a distributed mode; null
// otherwise. Collective over env.world when it creates one.
std::unique_ptr<Mesh> make_run_mesh(const TrainConfig& c, const AppEnv& env, LayoutPlan& plan);

}  // namespace sm
