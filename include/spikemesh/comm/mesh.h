// mesh.h — the process mesh: world = dp x tp x pp ranks, split into data-, tensor- and
// pipeline-parallel communicators (docs/architecture.md §6).
// Rank order: tp varies fastest, then dp, then pp:
//     world_rank = pp_i * (dp * tp) + dp_i * tp + tp_i
// so tensor-parallel peers are neighbours (same node under block rank placement).
//   dp comm:   ranks with the same (pp_i, tp_i), ordered by dp_i
//   tp comm:   ranks with the same (pp_i, dp_i), ordered by tp_i
//   pp comm:   ranks with the same (dp_i, tp_i), ordered by pp_i
//   dptp comm: ranks with the same pp_i (one pipeline stage), ordered by dp_i * tp + tp_i
//              (FSDP + TP shards over it)
// Invariant: Mesh::create validates the shape on every rank identically and agrees on it
// collectively before any other communication, so a bad mesh gives one message (rank 0
// prints it; every rank throws an Input error and exits non-zero) and never a hang.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "spikemesh/comm/comm.h"

namespace sm {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  long long product() const { return static_cast<long long>(dp) * tp * pp; }
  std::string str() const;  // "dp=2 tp=1 pp=1"
};

// Command-line view of the mesh (shared by `train`, `bench`, `plan`, `commtest`).
//   --mesh-shape D0 [D1 [D2]]  without --tp-mesh-dim/--dp-mesh-dim: DP TP PP in that order
//                              (missing dims are 1). With them (SpikingJelly style), dim
//                              tp_mesh_dim is tp, dim dp_mesh_dim is dp, and a remaining
//                              third dim (if any) is pp.
//   no --mesh-shape            dp = world size, tp = pp = 1.
struct MeshFlags {
  std::vector<int> mesh_shape;  // empty = not given
  int tp_mesh_dim = -1;         // -1 = not given
  int dp_mesh_dim = -1;
  std::string comm = "auto";    // --comm auto|mpi|nccl
  double comm_timeout = 600.0;  // --comm-timeout SECONDS, 0 = off
};

// Resolves flags to a shape. Checks every value (Input errors naming the flag): dims >= 1,
// 1..3 dims, mesh dims in range and distinct, product == world_size. Pure: no MPI calls.
MeshShape resolve_mesh_shape(const MeshFlags& flags, int world_size);
// Same checks for an explicit shape (product == world_size, every dim >= 1).
void validate_mesh_shape(const MeshShape& shape, int world_size);

// Coordinates of one world rank.
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0;
};
MeshCoord mesh_coord_of(const MeshShape& shape, int world_rank);
int mesh_world_rank(const MeshShape& shape, const MeshCoord& c);

class Mesh {
 public:
  // Collective over `world`: validates `shape` (Input error on every rank if bad, after a
  // collective check that every rank passed the same shape), splits the communicators,
  // gathers host names, and warns (rank 0) when a tp group spans nodes.
  static std::unique_ptr<Mesh> create(MPI_Comm world, const MeshShape& shape, const CommOptions& opts = {});
  // Resolves and applies flags: sets the process-wide comm timeout, parses --comm, then
  // create(). Collective over `world`.
  static std::unique_ptr<Mesh> create(MPI_Comm world, const MeshFlags& flags);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Ranks on this rank's node (MPI_COMM_TYPE_SHARED) and this rank's index among them.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  const std::string& host() const;
  const std::vector<std::string>& hosts() const { return hosts_; }  // by world rank

  Comm& world() { return *world_; }
  Comm& dp() { return *dp_; }
  Comm& tp() { return *tp_; }
  Comm& pp() { return *pp_; }
  Comm& dptp() { return *dptp_; }

  // World ranks of every group of each kind, e.g. groups("dp") = {{0,2},{1,3}} for
  // dp=2 tp=2 pp=1. kind: "dp" | "tp" | "pp" | "dptp". Pure function of the shape.
  static std::vector<std::vector<int>> groups(const MeshShape& shape, const std::string& kind);
  // Collective over the world: decides on every comm of the mesh (world, dp, tp, pp, dptp,
  // in that order) how device tensors travel (NCCL or MPI staged through host) and creates
  // the NCCL communicators. Call once after this rank's GPU is selected and before any
  // send/recv of device tensors (collectives decide lazily on first use otherwise).
  void init_device_backends();
  // Sum of the counters of every comm of the mesh.
  CommCounters total_counters() const;
  // Multi-line human description: shape, nodes, each group's world ranks and hosts, and
  // a warning line for every tp group that spans nodes. Same text on every rank.
  std::string describe() const;
  // "tensor-parallel group {0,1,2,3} spans 2 nodes (0,1 on node1, 2,3 on node2)", one per
  // such group (pure: no communication).
  std::vector<std::string> tp_span_warnings() const;
  // Collective over the world: where the ranks run, one line per node, from each rank's own
  // short description `mine` ("1 thread", "cuda:1"):
  //   "  node1: ranks 0,1 (2 on the node): 1 thread each\n  node2: rank 2 (1 on the node): 2 threads\n"
  // and where entries differ "  node1: ranks 0,1 (2 on the node): 0: cuda:0; 1: cuda:1\n".
  // Same text on every rank.
  std::string placement(const std::string& mine);

  ~Mesh();

 private:
  Mesh() = default;
  MeshShape shape_;
  MeshCoord coord_;
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1, node_count_ = 1;
  std::vector<std::string> hosts_;  // by world rank
  std::vector<int> node_of_;        // node index by world rank
  std::unique_ptr<Comm> world_, dp_, tp_, pp_, dptp_;
};

}  // namespace sm
