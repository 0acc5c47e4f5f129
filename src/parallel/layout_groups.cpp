// layout_groups.cpp — a layout's communicator groups and the queries about them (layout_groups.h).
#include "spikemesh/parallel/layout_groups.h"

#include <algorithm>
#include <vector>

#include "spikemesh/comm/mesh.h"

namespace sm {

LayoutGroups::LayoutGroups(Mesh* mesh) : mesh_(mesh) {
  if (!mesh) return;
  world_ = &mesh->world();
  dp_ = &mesh->dp();
  if (mesh->shape().tp > 1) tp_ = &mesh->tp();
  if (mesh->shape().pp > 1) pp_ = &mesh->pp();
}

LayoutGroups::LayoutGroups(Comm& dp) : world_(&dp), dp_(&dp) {}

int LayoutGroups::world_size() const { return world_ ? world_->size() : 1; }
int LayoutGroups::tp_rank() const { return tp_ ? tp_->rank() : 0; }
int LayoutGroups::tp_size() const { return tp_ ? tp_->size() : 1; }
// Every rank reads its dp part of each global batch (the tp ranks of a dp replica read the same
// samples) and writes its own shards: the data and checkpoint groups are the world.
int LayoutGroups::data_rank() const { return dp_ ? dp_->rank() : 0; }
int LayoutGroups::data_size() const { return dp_ ? dp_->size() : 1; }
bool LayoutGroups::is_root() const { return !world_ || world_->rank() == 0; }
int LayoutGroups::pp_rank() const { return pp_ ? pp_->rank() : 0; }
int LayoutGroups::pp_size() const { return pp_ ? pp_->size() : 1; }
CommCounters LayoutGroups::comm_counters() const { return dp_ ? dp_->counters() : CommCounters{}; }
CommCounters LayoutGroups::tp_comm_counters() const { return tp_ ? tp_->counters() : CommCounters{}; }

CommCounters LayoutGroups::all_comm_counters() const {
  CommCounters c;
  std::vector<const Comm*> seen;
  for (const Comm* g : {static_cast<const Comm*>(dp_), static_cast<const Comm*>(tp_), static_cast<const Comm*>(pp_)})
    if (g && std::find(seen.begin(), seen.end(), g) == seen.end()) {
      c += g->counters();
      seen.push_back(g);
    }
  return c;
}

}  // namespace sm
