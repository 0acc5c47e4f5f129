// run_mesh.cpp — configuration agreement and the process mesh of train and eval (run_mesh.h).
#include "spikemesh/app/run_mesh.h"

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/train/train_plan.h"

namespace sm {

namespace {
MeshFlags mesh_flags_of(const TrainConfig& c) {
  MeshFlags f;
  for (int64_t d : c.mesh_shape) f.mesh_shape.push_back(static_cast<int>(d));
  f.tp_mesh_dim = static_cast<int>(c.tp_mesh_dim);
  f.dp_mesh_dim = static_cast<int>(c.dp_mesh_dim);
  f.comm = c.comm;
  f.comm_timeout = c.comm_timeout;
  return f;
}
}  // namespace

void resolve_agreed(const AppEnv& env, const TrainConfigResolver& resolver, const std::function<void()>& resolve) {
  if (env.size == 1) {
    resolve();
    return;
  }
  Comm world(env.world, "world");  // collective over the world
  collective_check(world, resolve);
  check_same_text(world, resolver.to_toml(), "the resolved configuration (flags and --config file)");
}

std::unique_ptr<Mesh> make_run_mesh(const TrainConfig& c, const AppEnv& env, LayoutPlan& plan) {
  // Pure: identical on every rank, before any communicator.
  const MeshFlags flags = mesh_flags_of(c);
  const MeshShape shape = resolve_mesh_shape(flags, env.size);
  // A --pp-schedule-file is read here on every rank: a rank that cannot read it fails every rank
  // with one message (collective over the world), before any other communicator exists.
  if (env.size > 1) {
    Comm world(env.world, "world");
    collective_check(world, [&] { plan = training_layout_plan(c, shape, env.size); });
  } else {
    plan = training_layout_plan(c, shape, env.size);
  }
  if (env.size > 1 || c.distributed_mode != "none") return Mesh::create(env.world, flags);  // collective over the world
  return nullptr;
}

}  // namespace sm
