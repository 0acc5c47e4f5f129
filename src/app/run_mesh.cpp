// run_mesh.cpp — configuration agreement and the process mesh of train and eval (run_mesh.h).
#include "spikemesh/app/run_mesh.h"

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/mesh.h"

namespace sm {

void resolve_agreed(const AppEnv& env, const TrainConfigResolver& resolver, const std::function<void()>& resolve) {
  if (env.size == 1) {
    resolve();
    return;
  }
  Comm world(env.world, "world");  // collective over the world
  collective_check(world, resolve);
  check_same_text(world, resolver.to_toml(), "the resolved configuration (flags and --config file)");
}

std::unique_ptr<Mesh> make_run_mesh(const ParallelConfig& c, const LayoutPlan& plan, const AppEnv& env) {
  if (env.size > 1 || plan.mode != DistMode::None) return Mesh::create(env.world, mesh_flags(c));  // collective over the world
  return nullptr;
}

}  // namespace sm
