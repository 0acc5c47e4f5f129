// run_mesh.h — what `train` and `eval` share between parsing and running: the configuration
// resolved and agreed over the world, and the process mesh of the run's layout plan.
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

// The process mesh of `plan` (resolved at the command's top: planner/auto_choice.h) from c's mesh
// flags (recorded_parallel_config: the planner's pick as DP TP PP) when there are several ranks
// or a distributed mode; null otherwise. Collective over env.world when it creates one.
std::unique_ptr<Mesh> make_run_mesh(const ParallelConfig& c, const LayoutPlan& plan, const AppEnv& env);

}  // namespace sm
