// layout_groups.h — the communicator groups of a layout and what a run asks of them: its
// ranks in dp, tp and pp, the groups that data reads, checkpoints and metric reductions are
// collective over, the root rank, and the groups' traffic counters. A Layout (layout.h) holds
// one and hands it out through Layout::groups(); code that only asks "which group?" (checkpoint
// files, metric and stop reductions, data reads, evaluation reports, bench records) takes a
// `const LayoutGroups&`, not the Layout, so that "which group?" and "run a step" live apart.
// Invariants: with no mesh (one rank) every group is null and every rank/size is 0/1; tp_ is
// set only when tp > 1 and pp_ only when pp > 1; the groups are the mesh's (never owned here),
// so a const LayoutGroups still hands out its Comms: const fixes which groups, not their traffic.
#pragma once
#include "spikemesh/comm/comm.h"

namespace sm {

class Comm;
class Mesh;

class LayoutGroups {
 public:
  explicit LayoutGroups(Mesh* mesh);  // null: one rank
  explicit LayoutGroups(Comm& dp);    // one communicator: the world and dp (tp = pp = 1)

  bool distributed() const { return world_ != nullptr; }
  Mesh* mesh() const { return mesh_; }  // null alone or over a single Comm
  int world_size() const;
  // Tensor parallelism: this rank's index in its tp group and the group's size (0 and 1 without tp).
  int tp_rank() const;
  int tp_size() const;
  // Data: this rank takes part data_rank() of data_size() of every global batch.
  int data_rank() const;
  int data_size() const;
  // Groups (nullptr alone): checkpoint files and metric/stop reductions (the dataset's
  // group is data_group_of(mesh), opened before the layout exists).
  Comm* world_comm() const { return world_; }  // every rank of the layout
  Comm* checkpoint_comm() const { return world_; }
  Comm* metrics_comm() const { return world_; }
  bool is_root() const;  // writes logs and metrics (world rank 0)
  // Pipeline parallelism: this rank's pipeline rank and the pipeline's size; the pp group.
  int pp_rank() const;
  int pp_size() const;
  Comm* pp_comm() const { return pp_; }
  // The gradient-reduction (dp) and tensor-parallel groups (nullptr alone / without tp): the
  // ranks of one pipeline stage are their product.
  Comm* dp_comm() const { return dp_; }
  Comm* tp_comm() const { return tp_; }
  CommCounters comm_counters() const;      // the gradient-reduction (dp) comm's counters (zeros alone)
  CommCounters tp_comm_counters() const;   // the tp group's counters (zeros without tp)
  CommCounters all_comm_counters() const;  // dp + tp + pp (each group once; zeros alone)

 private:
  Mesh* mesh_ = nullptr;
  Comm* world_ = nullptr;  // metric reductions, data and checkpoint groups
  Comm* dp_ = nullptr;     // gradient reductions
  Comm* tp_ = nullptr;     // the tensor-parallel group (tp > 1 only)
  Comm* pp_ = nullptr;     // the pipeline group (pp > 1 only)
};

}  // namespace sm
