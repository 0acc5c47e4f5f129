// test_mesh.cpp — Mesh: which world ranks land in which dp/tp/pp/dptp group for every shape
// of the current world size (np 2 and np 4), hard-coded tables for some shapes, traffic on
// the sub-communicators, flag resolution (DP TP PP and SpikingJelly's --tp/--dp-mesh-dim),
// and bad meshes (an Input error on every rank, no hang); the per-node placement table and the
// ring reachability exchange.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

#include "mpi_test_env.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/comm/reachability.h"

namespace sm {
namespace {

struct Coord3 {
  int dp, tp, pp;
};

// Independent enumeration: world ranks are numbered with tp innermost, then dp, then pp.
std::vector<Coord3> enumerate_coords(const MeshShape& s) {
  std::vector<Coord3> c;
  for (int pp = 0; pp < s.pp; ++pp)
    for (int dp = 0; dp < s.dp; ++dp)
      for (int tp = 0; tp < s.tp; ++tp) c.push_back({dp, tp, pp});
  return c;
}

// World ranks whose coords agree with rank `me` except on the varying axis, in axis order.
std::vector<int> expected_group(const std::vector<Coord3>& c, int me, char axis) {
  std::vector<std::pair<int, int>> members;  // (axis coordinate, world rank)
  for (int r = 0; r < static_cast<int>(c.size()); ++r) {
    bool same = (axis == 'd' || c[r].dp == c[me].dp) && (axis == 't' || c[r].tp == c[me].tp) &&
                (axis == 'p' || c[r].pp == c[me].pp);
    if (axis == 's') same = c[r].pp == c[me].pp;  // dptp: one pipeline stage
    if (!same) continue;
    int key = axis == 'd' ? c[r].dp : axis == 't' ? c[r].tp : axis == 'p' ? c[r].pp : r;
    members.push_back({key, r});
  }
  std::sort(members.begin(), members.end());
  std::vector<int> g;
  for (auto& m : members) g.push_back(m.second);
  return g;
}

std::vector<MeshShape> shapes_of(int w) {
  std::vector<MeshShape> out;
  for (int dp = 1; dp <= w; ++dp)
    for (int tp = 1; tp <= w; ++tp)
      for (int pp = 1; pp <= w; ++pp)
        if (dp * tp * pp == w) out.push_back(MeshShape{dp, tp, pp});
  return out;
}

TEST(MeshSplit, EveryShapeOfThisWorld) {
  const int w = test::world_size(), me = test::world_rank();
  auto shapes = shapes_of(w);
  EXPECT_GE(shapes.size(), w == 1 ? 1u : 3u);
  for (const MeshShape& s : shapes) {
    SCOPED_TRACE(s.str());
    auto mesh = Mesh::create(test::world(), s);
    auto coords = enumerate_coords(s);
    EXPECT_EQ(mesh->coord().dp, coords[me].dp);
    EXPECT_EQ(mesh->coord().tp, coords[me].tp);
    EXPECT_EQ(mesh->coord().pp, coords[me].pp);
    EXPECT_EQ(mesh->dp().world_ranks(), expected_group(coords, me, 'd'));
    EXPECT_EQ(mesh->tp().world_ranks(), expected_group(coords, me, 't'));
    EXPECT_EQ(mesh->pp().world_ranks(), expected_group(coords, me, 'p'));
    EXPECT_EQ(mesh->dptp().world_ranks(), expected_group(coords, me, 's'));
    EXPECT_EQ(mesh->dp().rank(), coords[me].dp);
    EXPECT_EQ(mesh->tp().rank(), coords[me].tp);
    EXPECT_EQ(mesh->pp().rank(), coords[me].pp);
    EXPECT_EQ(mesh->dp().size(), s.dp);
    EXPECT_EQ(mesh->tp().size(), s.tp);
    EXPECT_EQ(mesh->pp().size(), s.pp);
    EXPECT_EQ(mesh->world().size(), w);
    // The pure group listing agrees with the communicators.
    bool found = false;
    for (const auto& g : Mesh::groups(s, "tp")) found |= g == mesh->tp().world_ranks();
    EXPECT_TRUE(found);
    // Traffic stays inside each group: sum of world ranks over the group.
    for (Comm* c : {&mesh->dp(), &mesh->tp(), &mesh->pp(), &mesh->dptp()}) {
      Tensor t = Tensor::full({3}, me, DType::I64);
      c->all_reduce(t);
      int64_t want = 0;
      for (int r : c->world_ranks()) want += r;
      EXPECT_EQ(t.at(2), want) << c->name();
    }
    EXPECT_EQ(mesh->local_size(), w);  // tests run on one node
    EXPECT_EQ(mesh->node_count(), 1);
    EXPECT_EQ(static_cast<int>(mesh->hosts().size()), w);
    EXPECT_NE(mesh->describe().find(s.str()), std::string::npos);
  }
}

TEST(MeshSplit, HardCodedTablesAtFourRanks) {
  SM_REQUIRE_WORLD_SIZE(4);
  using G = std::vector<std::vector<int>>;
  const std::map<std::tuple<int, int, int>, std::map<std::string, G>> table = {
      {{2, 2, 1}, {{"dp", G{{0, 2}, {1, 3}}}, {"tp", G{{0, 1}, {2, 3}}}, {"pp", G{{0}, {1}, {2}, {3}}}}},
      {{1, 2, 2}, {{"dp", G{{0}, {1}, {2}, {3}}}, {"tp", G{{0, 1}, {2, 3}}}, {"pp", G{{0, 2}, {1, 3}}}}},
      {{2, 1, 2}, {{"dp", G{{0, 1}, {2, 3}}}, {"tp", G{{0}, {1}, {2}, {3}}}, {"pp", G{{0, 2}, {1, 3}}}}},
      {{4, 1, 1}, {{"dp", G{{0, 1, 2, 3}}}, {"tp", G{{0}, {1}, {2}, {3}}}, {"pp", G{{0}, {1}, {2}, {3}}}}},
  };
  const int me = test::world_rank();
  for (const auto& [dims, groups] : table) {
    MeshShape s{std::get<0>(dims), std::get<1>(dims), std::get<2>(dims)};
    SCOPED_TRACE(s.str());
    auto mesh = Mesh::create(test::world(), s);
    for (const auto& [kind, gs] : groups) {
      EXPECT_EQ(Mesh::groups(s, kind), gs) << kind;
      Comm& c = kind == "dp" ? mesh->dp() : kind == "tp" ? mesh->tp() : mesh->pp();
      int hits = 0;
      for (const auto& g : gs)
        if (std::find(g.begin(), g.end(), me) != g.end()) {
          EXPECT_EQ(c.world_ranks(), g) << kind;
          ++hits;
        }
      EXPECT_EQ(hits, 1) << kind;
    }
  }
  EXPECT_EQ(Mesh::groups(MeshShape{2, 2, 1}, "dptp"), (G{{0, 1, 2, 3}}));
  EXPECT_EQ(Mesh::groups(MeshShape{1, 2, 2}, "dptp"), (G{{0, 1}, {2, 3}}));
}

TEST(MeshFlagsResolve, OrderAndSpikingJellyDims) {
  MeshFlags f;
  MeshShape s = resolve_mesh_shape(f, 4);  // no --mesh-shape: all data parallel
  EXPECT_EQ(std::make_tuple(s.dp, s.tp, s.pp), std::make_tuple(4, 1, 1));
  f.mesh_shape = {2, 2};
  s = resolve_mesh_shape(f, 4);
  EXPECT_EQ(std::make_tuple(s.dp, s.tp, s.pp), std::make_tuple(2, 2, 1));
  f.mesh_shape = {1, 2, 3};
  s = resolve_mesh_shape(f, 6);
  EXPECT_EQ(std::make_tuple(s.dp, s.tp, s.pp), std::make_tuple(1, 2, 3));
  f.mesh_shape = {4, 2};  // SpikingJelly: --tp-mesh-dim 0 --dp-mesh-dim 1
  f.tp_mesh_dim = 0;
  f.dp_mesh_dim = 1;
  s = resolve_mesh_shape(f, 8);
  EXPECT_EQ(std::make_tuple(s.dp, s.tp, s.pp), std::make_tuple(2, 4, 1));
  f.mesh_shape = {3, 2, 5};  // only tp named: the others take dp, pp in order
  f.tp_mesh_dim = 2;
  f.dp_mesh_dim = -1;
  s = resolve_mesh_shape(f, 30);
  EXPECT_EQ(std::make_tuple(s.dp, s.tp, s.pp), std::make_tuple(3, 5, 2));
}

void expect_input_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MeshFlagsResolve, BadValuesNameTheFlag) {
  MeshFlags f;
  f.mesh_shape = {2, 0, 1};
  expect_input_error([&] { resolve_mesh_shape(f, 2); }, "must be >= 1");
  f.mesh_shape = {1, 1, 1, 2};
  expect_input_error([&] { resolve_mesh_shape(f, 2); }, "1 to 3 values");
  f.mesh_shape = {2, 2};
  f.tp_mesh_dim = 2;
  expect_input_error([&] { resolve_mesh_shape(f, 4); }, "--tp-mesh-dim 2");
  f.tp_mesh_dim = 1;
  f.dp_mesh_dim = 1;
  expect_input_error([&] { resolve_mesh_shape(f, 4); }, "both name");
  MeshFlags g;
  g.tp_mesh_dim = 0;
  expect_input_error([&] { resolve_mesh_shape(g, 4); }, "need --mesh-shape");
}

TEST(MeshCreate, BadMeshIsAnInputErrorOnEveryRankWithoutHanging) {
  const int w = test::world_size();
  expect_input_error([&] { Mesh::create(test::world(), MeshShape{w + 1, 1, 1}); },
                     "needs " + std::to_string(w + 1) + " ranks, but this job has " + std::to_string(w));
  expect_input_error([&] { Mesh::create(test::world(), MeshShape{w, 0, 1}); }, "must be >= 1");
  expect_input_error([&] { Mesh::create(test::world(), MeshShape{-w, -1, 1}); }, "must be >= 1");
  MeshFlags f;
  f.mesh_shape = {3 * w, 1, 1};
  expect_input_error([&] { Mesh::create(test::world(), f); }, "needs " + std::to_string(3 * w) + " ranks");
  f.mesh_shape = {w};
  f.comm = "gloo";
  expect_input_error([&] { Mesh::create(test::world(), f); }, "--comm must be");
  // The world is still usable: a good mesh right after.
  f.comm = "mpi";
  f.comm_timeout = 60;
  auto mesh = Mesh::create(test::world(), f);
  EXPECT_EQ(mesh->dp().size(), w);
  EXPECT_EQ(mesh->dp().backend_option(), CommBackend::Mpi);
}

TEST(MeshCreate, CountersSumOverTheMesh) {
  const int w = test::world_size();
  auto mesh = Mesh::create(test::world(), MeshShape{w, 1, 1});
  Tensor t = Tensor::zeros({10}, DType::F32);
  mesh->dp().all_reduce(t);
  mesh->tp().all_reduce(t);
  mesh->world().barrier();
  CommCounters c = mesh->total_counters();
  EXPECT_EQ(c[CommOp::AllReduce].calls, 2u);
  EXPECT_EQ(c[CommOp::AllReduce].payload_bytes, 80u);
  EXPECT_EQ(c[CommOp::Barrier].calls, 1u);
}

TEST(MeshPlacement, OneLinePerNodeWithEveryRanksEntry) {
  const int w = test::world_size(), r = test::world_rank();
  auto mesh = Mesh::create(test::world(), MeshShape{w, 1, 1});
  EXPECT_TRUE(mesh->tp_span_warnings().empty());  // tp = 1: nothing can span nodes
  // Ranks of one node share a host name; under mpirun on this machine they are all one node.
  ASSERT_EQ(mesh->node_count(), 1);
  const std::string same = mesh->placement("1 thread");
  EXPECT_EQ(same, "  " + mesh->host() + ": ranks " + [&] {
    std::string s;
    for (int i = 0; i < w; ++i) s += (i ? "," : "") + std::to_string(i);
    return s;
  }() + " (" + std::to_string(w) + " on the node): 1 thread each\n");
  const std::string differ = mesh->placement("cuda:" + std::to_string(r));
  EXPECT_NE(differ.find(": 0: cuda:0; 1: cuda:1"), std::string::npos) << differ;
}

TEST(MeshPlacement, NoTpWarningWhileEveryRankIsOnOneNode) {
  // The warning across nodes (its text, once, naming the hosts) is checked on the virtual
  // cluster (tests/cluster/run.sh); here every shape keeps its tp groups on the one node.
  const int w = test::world_size();
  for (int tp : {1, 2, w})
    if (w % tp == 0) EXPECT_TRUE(Mesh::create(test::world(), MeshShape{w / tp, tp, 1})->tp_span_warnings().empty());
}

TEST(RingReachable, CompletesAndLeavesNoMessageBehind) {
  check_ring_reachable(test::world());
  check_ring_reachable(test::world());  // twice: the first exchange matched every message it sent
  int probe = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, test::world(), &probe, MPI_STATUS_IGNORE);
  EXPECT_EQ(probe, 0);
  MPI_Barrier(test::world());
}

}  // namespace
}  // namespace sm
