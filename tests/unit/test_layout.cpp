// test_layout.cpp — how a Layout (parallel/layout.h) is made and what it shows, on one rank:
// it is built only from a resolved plan bound to its model (resolved_layout_plan: plan_layout
// then bind_layout_plan; a plan that is not bound, or is another mesh's, is refused), and its
// communicator groups are a LayoutGroups it holds and hands out through groups(), not a base.
#include <gtest/gtest.h>

#include <type_traits>
#include <utility>

#include "error_of.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/layout_plan.h"

namespace sm {
namespace {

// The groups are reached through groups() only, and a Layout resolves no options itself.
static_assert(!std::is_base_of_v<LayoutGroups, Layout>, "a Layout holds its groups, it is not one");
static_assert(!std::is_constructible_v<Layout, Model&, Mesh*, const LayoutOptions&>,
              "a Layout is built from a resolved plan, not from options");
static_assert(!std::is_constructible_v<Layout, Model&, Comm&, const LayoutOptions&>,
              "a Layout over one communicator is built from a resolved plan, not from options");

std::unique_ptr<Model> small_model() {
  ModelSelection sel;
  sel.model = "fmnist_csnn";
  sel.vars = {"C=4"};
  sel.T = 2;
  auto m = sel.build();
  m->finalize(DType::F64, Device::cpu(), 7);
  return m;
}

TEST(Layout, ResolvedPlanIsPhaseOneThenPhaseTwo) {
  auto m = small_model();
  LayoutOptions lo;
  lo.memopt.level = 1;
  const LayoutPlan got = resolved_layout_plan(lo, MeshShape{}, 1, 8, *m);
  LayoutPlan want = plan_layout(lo, MeshShape{}, 1, 8);
  EXPECT_FALSE(want.bound);
  bind_layout_plan(want, *m);
  EXPECT_TRUE(got.bound);
  EXPECT_EQ(got.model_name, m->info.name);
  EXPECT_EQ(got.units, static_cast<int>(m->units.size()));
  EXPECT_EQ(got.batch.replica, 8);
  EXPECT_EQ(got.batch.global, 8);
  EXPECT_EQ(got.world_size, 1);
  EXPECT_EQ(got.options.memopt.level, 1);
  EXPECT_EQ(got.describe(), want.describe());
  EXPECT_EQ(got.mode, want.mode);
  EXPECT_EQ(got.reduction, want.reduction);
  // Phase 1's refusals reach the caller unchanged (one message naming the flag).
  LayoutOptions pp;
  pp.mode = "pp";
  EXPECT_NE(error_of([&] { resolved_layout_plan(pp, MeshShape{}, 1, 0, *m); }).find("--distributed-mode pp"),
            std::string::npos);
}

TEST(Layout, RefusesAPlanNotBoundToItsModelOrOfAnotherMesh) {
  auto m = small_model();
  const LayoutPlan unbound = plan_layout(LayoutOptions{}, MeshShape{}, 1, 0);
  EXPECT_NE(error_of([&] { Layout l(*m, nullptr, unbound); }).find("bind_layout_plan"), std::string::npos);
  LayoutOptions dp;
  dp.mode = "dp";
  const LayoutPlan two_ranks = resolved_layout_plan(dp, MeshShape{2, 1, 1}, 2, 0, *m);
  EXPECT_NE(error_of([&] { Layout l(*m, nullptr, two_ranks); }).find("is not this layout's"), std::string::npos);
}

TEST(Layout, OneRankGroupsThroughOneAccessor) {
  auto m = small_model();
  Layout layout(*m, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, *m));
  const LayoutGroups& g = std::as_const(layout).groups();
  EXPECT_EQ(&g, &layout.groups());  // one object, whichever way it is reached
  EXPECT_FALSE(g.distributed());
  EXPECT_EQ(g.mesh(), nullptr);
  EXPECT_EQ(g.world_size(), 1);
  EXPECT_EQ(g.tp_rank(), 0);
  EXPECT_EQ(g.tp_size(), 1);
  EXPECT_EQ(g.data_rank(), 0);
  EXPECT_EQ(g.data_size(), 1);
  EXPECT_EQ(g.pp_rank(), 0);
  EXPECT_EQ(g.pp_size(), 1);
  EXPECT_TRUE(g.is_root());
  for (Comm* c : {g.world_comm(), g.checkpoint_comm(), g.metrics_comm(), g.dp_comm(), g.tp_comm(), g.pp_comm()})
    EXPECT_EQ(c, nullptr);
  EXPECT_EQ(g.all_comm_counters().total_calls(), 0u);
  EXPECT_EQ(layout.describe(), "dp=1 tp=1 pp=1");
  EXPECT_TRUE(layout.plan().bound);
  EXPECT_TRUE(layout.counts_in_metrics());
}

}  // namespace
}  // namespace sm
