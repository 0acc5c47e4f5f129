// mesh.cpp — Mesh: shape resolution and validation, collective agreement on the shape, the
// dp/tp/pp/dptp communicator split, node locality (MPI_COMM_TYPE_SHARED) and describe().
// Invariant: no rank leaves Mesh::create alone: validation errors are found locally, then
// agreed on by one MPI_Allreduce over the world, then thrown as Input errors on every rank.
#include "spikemesh/comm/mesh.h"
#include "spikemesh/comm/blocking_guard.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "mesh_internal.h"
#include "pending_op.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"

namespace sm {

namespace comm_detail {
int process_world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
std::string process_host() {
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  return std::string(host, static_cast<size_t>(len));
}
}  // namespace comm_detail

std::string MeshShape::str() const {
  return "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp);
}

void validate_mesh_shape(const MeshShape& s, int world_size) {
  const std::pair<const char*, int> dims[] = {{"dp", s.dp}, {"tp", s.tp}, {"pp", s.pp}};
  for (const auto& d : dims)
    if (d.second < 1)
      SM_INPUT_ERROR("--mesh-shape: the " << d.first << " size must be >= 1, got " << d.second);
  if (s.product() != world_size)
    SM_INPUT_ERROR("--mesh-shape " << s.dp << " " << s.tp << " " << s.pp << " (" << s.str() << ") needs "
                                   << s.product() << " ranks, but this job has " << world_size
                                   << " (mpirun -np / srun -n); dp x tp x pp must equal the number of ranks");
}

MeshShape resolve_mesh_shape(const MeshFlags& f, int world_size) {
  MeshShape s;
  const auto& v = f.mesh_shape;
  if (v.empty()) {
    if (f.tp_mesh_dim >= 0 || f.dp_mesh_dim >= 0)
      SM_INPUT_ERROR("--tp-mesh-dim/--dp-mesh-dim need --mesh-shape");
    s.dp = world_size;
    validate_mesh_shape(s, world_size);
    return s;
  }
  const int nd = static_cast<int>(v.size());
  if (nd > 3) SM_INPUT_ERROR("--mesh-shape takes 1 to 3 values (DP TP PP), got " << nd);
  for (int i = 0; i < nd; ++i)
    if (v[i] < 1) SM_INPUT_ERROR("--mesh-shape value " << i << " is " << v[i] << "; every mesh dimension must be >= 1");
  if (f.tp_mesh_dim < -1 || f.tp_mesh_dim >= nd)
    SM_INPUT_ERROR("--tp-mesh-dim " << f.tp_mesh_dim << " is not a dimension of the " << nd << "-value --mesh-shape");
  if (f.dp_mesh_dim < -1 || f.dp_mesh_dim >= nd)
    SM_INPUT_ERROR("--dp-mesh-dim " << f.dp_mesh_dim << " is not a dimension of the " << nd << "-value --mesh-shape");
  if (f.tp_mesh_dim >= 0 && f.tp_mesh_dim == f.dp_mesh_dim)
    SM_INPUT_ERROR("--tp-mesh-dim and --dp-mesh-dim both name mesh dimension " << f.tp_mesh_dim);
  // Roles: named dims first, then the remaining dims take the remaining roles dp, tp, pp in order.
  int* roles[3] = {&s.dp, &s.tp, &s.pp};
  bool role_taken[3] = {false, false, false};
  std::vector<bool> dim_used(nd, false);
  if (f.dp_mesh_dim >= 0) {
    s.dp = v[f.dp_mesh_dim];
    role_taken[0] = true;
    dim_used[f.dp_mesh_dim] = true;
  }
  if (f.tp_mesh_dim >= 0) {
    s.tp = v[f.tp_mesh_dim];
    role_taken[1] = true;
    dim_used[f.tp_mesh_dim] = true;
  }
  int role = 0;
  for (int d = 0; d < nd; ++d) {
    if (dim_used[d]) continue;
    while (role < 3 && role_taken[role]) ++role;
    *roles[role] = v[d];
    role_taken[role] = true;
  }
  validate_mesh_shape(s, world_size);
  return s;
}

MeshCoord mesh_coord_of(const MeshShape& s, int r) {
  MeshCoord c;
  c.tp = r % s.tp;
  c.dp = (r / s.tp) % s.dp;
  c.pp = r / (s.tp * s.dp);
  return c;
}

int mesh_world_rank(const MeshShape& s, const MeshCoord& c) { return c.pp * s.dp * s.tp + c.dp * s.tp + c.tp; }

std::vector<std::vector<int>> Mesh::groups(const MeshShape& s, const std::string& kind) {
  std::vector<std::vector<int>> out;
  auto at = [&](int dp, int tp, int pp) { return mesh_world_rank(s, MeshCoord{dp, tp, pp}); };
  if (kind == "dp") {
    for (int pp = 0; pp < s.pp; ++pp)
      for (int tp = 0; tp < s.tp; ++tp) {
        out.emplace_back();
        for (int dp = 0; dp < s.dp; ++dp) out.back().push_back(at(dp, tp, pp));
      }
  } else if (kind == "tp") {
    for (int pp = 0; pp < s.pp; ++pp)
      for (int dp = 0; dp < s.dp; ++dp) {
        out.emplace_back();
        for (int tp = 0; tp < s.tp; ++tp) out.back().push_back(at(dp, tp, pp));
      }
  } else if (kind == "pp") {
    for (int dp = 0; dp < s.dp; ++dp)
      for (int tp = 0; tp < s.tp; ++tp) {
        out.emplace_back();
        for (int pp = 0; pp < s.pp; ++pp) out.back().push_back(at(dp, tp, pp));
      }
  } else if (kind == "dptp") {
    for (int pp = 0; pp < s.pp; ++pp) {
      out.emplace_back();
      for (int dp = 0; dp < s.dp; ++dp)
        for (int tp = 0; tp < s.tp; ++tp) out.back().push_back(at(dp, tp, pp));
    }
  } else {
    SM_CHECK(false, "unknown mesh group kind '" << kind << "' (dp, tp, pp, dptp)");
  }
  return out;
}

namespace {

// Collective over world: every rank learns whether any rank failed and whether all agree.
void agree_on_shape(MPI_Comm world, const MeshShape& s, const std::string& local_error) {
  int ok = local_error.empty() ? 1 : 0;
  int in[8] = {ok, s.dp, s.tp, s.pp, -ok, -s.dp, -s.tp, -s.pp};
  int mn[8];
  SM_MPI_CHECK(MPI_Allreduce(in, mn, 8, MPI_INT, MPI_MIN, world));
  if (!local_error.empty()) SM_INPUT_ERROR(local_error);
  if (mn[0] == 0) SM_INPUT_ERROR("another rank rejected the mesh shape (its flags differ from rank 0's?)");
  if (mn[1] != -mn[5] || mn[2] != -mn[6] || mn[3] != -mn[7])
    SM_INPUT_ERROR("ranks disagree on the mesh shape (dp " << mn[1] << ".." << -mn[5] << ", tp " << mn[2] << ".."
                                                          << -mn[6] << ", pp " << mn[3] << ".." << -mn[7]
                                                          << "); every rank must get the same flags");
}

std::unique_ptr<Comm> split_comm(MPI_Comm world, int color, int key, const std::string& name, const CommOptions& o) {
  MPI_Comm c;
  SM_MPI_CHECK(MPI_Comm_split(world, color, key, &c));
  auto comm = std::make_unique<Comm>(c, name, o);
  MPI_Comm_free(&c);
  return comm;
}

std::string group_str(const std::vector<int>& g) {
  std::string s = "{";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "}";
}

}  // namespace

std::unique_ptr<Mesh> Mesh::create(MPI_Comm world, const MeshFlags& flags) {
  MeshShape shape;
  std::string err;
  CommOptions opts;
  int world_size = 1;
  SM_MPI_CHECK(MPI_Comm_size(world, &world_size));
  try {
    set_comm_timeout_seconds(flags.comm_timeout);
    opts.backend = comm_backend_from_name(flags.comm);
    shape = resolve_mesh_shape(flags, world_size);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Input) throw;
    err = e.what();
  }
  if (!err.empty()) {
    agree_on_shape(world, shape, err);  // throws on every rank
  }
  return create(world, shape, opts);
}

std::unique_ptr<Mesh> Mesh::create(MPI_Comm world, const MeshShape& shape, const CommOptions& opts) {
  int world_size = 1, world_rank = 0;
  SM_MPI_CHECK(MPI_Comm_size(world, &world_size));
  SM_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  // Raw MPI calls (splits, node discovery) until the Comms exist: under the watchdog's deadline.
  BlockingDeadline deadline("creating the process mesh (MPI_Comm_split, MPI_Allgather over the world)", world);
  std::string err;
  try {
    validate_mesh_shape(shape, world_size);
  } catch (const Error& e) {
    err = e.what();
  }
  agree_on_shape(world, shape, err);

  std::unique_ptr<Mesh> m(new Mesh());
  m->shape_ = shape;
  m->world_rank_ = world_rank;
  m->world_size_ = world_size;
  m->coord_ = mesh_coord_of(shape, world_rank);
  const MeshCoord c = m->coord_;
  const MeshShape& s = shape;
  m->world_ = std::make_unique<Comm>(world, "world", opts);
  comm_detail::set_abort_comm(m->world_->mpi_comm());
  m->dp_ = split_comm(world, c.pp * s.tp + c.tp, c.dp, "dp", opts);
  m->tp_ = split_comm(world, c.pp * s.dp + c.dp, c.tp, "tp", opts);
  m->pp_ = split_comm(world, c.dp * s.tp + c.tp, c.pp, "pp", opts);
  m->dptp_ = split_comm(world, c.pp, c.dp * s.tp + c.tp, "dptp", opts);

  // Node locality: ranks sharing memory form a node; its leader is its lowest world rank.
  MPI_Comm node;
  SM_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &m->local_rank_);
  MPI_Comm_size(node, &m->local_size_);
  int leader = world_rank;
  SM_MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, node));
  MPI_Comm_free(&node);
  std::vector<int> leaders(world_size);
  SM_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world));
  std::map<int, int> node_index;
  m->node_of_.resize(world_size);
  for (int r = 0; r < world_size; ++r) {
    auto it = node_index.emplace(leaders[r], static_cast<int>(node_index.size())).first;
    m->node_of_[r] = it->second;
  }
  m->node_count_ = static_cast<int>(node_index.size());
  std::vector<char> names(static_cast<size_t>(world_size) * MPI_MAX_PROCESSOR_NAME, 0);
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, 0);
  std::string host = comm_detail::process_host();
  std::memcpy(mine.data(), host.data(), std::min<size_t>(host.size(), MPI_MAX_PROCESSOR_NAME - 1));
  SM_MPI_CHECK(MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                             MPI_CHAR, world));
  for (int r = 0; r < world_size; ++r) m->hosts_.emplace_back(&names[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  comm_detail::set_world_hosts(m->hosts_);

  if (world_rank == 0)
    for (const std::string& w : m->tp_span_warnings())
      SM_WARN(w << ": tp traffic will cross the network (place tp peers on one node: ranks are numbered tp fastest, "
                   "so give each node a multiple of tp consecutive ranks)");
  return m;
}

Mesh::~Mesh() {
  if (world_ && comm_detail::abort_comm_or(MPI_COMM_NULL) == world_->mpi_comm())
    comm_detail::set_abort_comm(MPI_COMM_NULL);
}

const std::string& Mesh::host() const { return hosts_[world_rank_]; }

void Mesh::init_device_backends() {
  for (Comm* c : {world_.get(), dp_.get(), tp_.get(), pp_.get(), dptp_.get()}) c->device_backend_name();
}

CommCounters Mesh::total_counters() const {
  CommCounters t;
  for (const auto* c : {&world_, &dp_, &tp_, &pp_, &dptp_}) t += (*c)->counters();
  return t;
}

std::string Mesh::describe() const {
  std::ostringstream os;
  std::set<std::string> uniq(hosts_.begin(), hosts_.end());
  os << "mesh " << shape_.str() << ": " << world_size_ << " rank" << (world_size_ == 1 ? "" : "s") << " on "
     << node_count_ << " node" << (node_count_ == 1 ? "" : "s") << "\n";
  os << "rank order: tp fastest, then dp, then pp (rank = pp_i*dp*tp + dp_i*tp + tp_i)\n";
  const MeshShape& s = shape_;
  for (const char* kind : {"dp", "tp", "pp"}) {
    auto gs = groups(s, kind);
    os << kind << " groups (" << gs.size() << " x " << gs[0].size() << " rank" << (gs[0].size() == 1 ? "" : "s") << "):";
    for (const auto& g : gs) os << " " << group_str(g);
    os << "\n";
  }
  os << "  rank  dp  tp  pp  node  host\n";
  for (int r = 0; r < world_size_; ++r) {
    MeshCoord c = mesh_coord_of(s, r);
    char line[512];
    std::snprintf(line, sizeof line, "  %4d %3d %3d %3d %5d  %s\n", r, c.dp, c.tp, c.pp, node_of_[r], hosts_[r].c_str());
    os << line;
  }
  for (const std::string& w : tp_span_warnings()) os << "warning: " << w << "\n";
  return os.str();
}

std::vector<std::string> Mesh::tp_span_warnings() const {
  std::vector<std::string> out;
  for (const auto& g : groups(shape_, "tp")) {
    std::set<int> nodes;
    for (int r : g) nodes.insert(node_of_[r]);
    if (nodes.size() > 1)
      out.push_back("tensor-parallel group " + group_str(g) + " spans " + std::to_string(nodes.size()) + " nodes (" +
                    comm_detail::join_ranks_on_hosts(g) + ")");
  }
  return out;
}

std::string Mesh::placement(const std::string& mine) {
  const std::vector<std::string> all = all_gather_strings(*world_, mine);
  std::ostringstream os;
  for (int n = 0; n < node_count_; ++n) {
    std::vector<int> ranks;
    for (int r = 0; r < world_size_; ++r)
      if (node_of_[r] == n) ranks.push_back(r);
    const bool same = std::all_of(ranks.begin(), ranks.end(), [&](int r) { return all[r] == all[ranks[0]]; });
    os << "  " << hosts_[ranks[0]] << ": rank" << (ranks.size() == 1 ? " " : "s ") << comm_detail::join_ranks(ranks)
       << " (" << ranks.size() << " on the node): ";
    if (same) {
      os << all[ranks[0]] << (ranks.size() > 1 ? " each" : "");
    } else {
      for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "; " : "") << ranks[i] << ": " << all[ranks[i]];
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace sm
