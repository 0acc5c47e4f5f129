// test_auto_layout.cpp — the layout planner over ranks (planner/auto_layout.h): every rank ranks
// alike and gets the same choice; rank 0 alone writes the calibration file, which every rank then
// reads (nothing measured again); the machine's links are measured at every group size that
// divides the world; the chosen layout is one the layout plan accepts for this mesh.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mpi_test_env.h"
#include "mpi_test_files.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/planner/auto_layout.h"

namespace sm {
namespace {

AutoLayoutRequest request(const std::string& path, Preference p) {
  ModelSelection sel;
  sel.model = "fmnist_csnn";
  sel.vars = {"C=4"};
  sel.T = 2;
  AutoLayoutRequest r;
  r.profile.build = [sel] { return sel.build(); };
  r.profile.key = "fmnist_csnn C=4 T=2";
  r.model_name = "fmnist_csnn";
  r.world = test::world_size();
  r.global_batch = 2 * test::world_size();
  r.calibration_path = path;
  r.prefer = p;
  return r;
}

TEST(AutoLayoutRanks, EveryRankChoosesAlikeAndTheFileIsWrittenOnce) {
  Comm& world = *test::world_group();
  const std::string path = test::shared_name("sm_auto", "calibration.json");
  if (world.rank() == 0) std::remove(path.c_str());
  world.barrier();
  for (Preference p : {Preference::Speed, Preference::Memory, Preference::Capacity}) {
    const AutoLayoutResult r = choose_layout(&world, request(path, p));
    const std::string mine = r.chosen.label() + " | " + r.reason;
    EXPECT_EQ(broadcast_string(world, mine, 0), mine) << "rank " << world.rank();
    // the pick runs: the layout plan accepts it on this mesh
    const LayoutCandidate& c = r.chosen;
    EXPECT_EQ(c.mesh.dp * c.mesh.tp * c.mesh.pp, world.size());
    const LayoutOptions defaults;
    EXPECT_NO_THROW(plan_layout(c.apply_to(defaults), c.mesh, world.size(), 2 * world.size() / c.mesh.dp));
  }
  // every rank reads what rank 0 wrote: the second run measured nothing
  const AutoLayoutResult again = choose_layout(&world, request(path, Preference::Speed));
  EXPECT_NE(again.calibration_note.find("from " + path), std::string::npos) << again.calibration_note;
  const CalibrationCache c = read_calibration(path);
  for (int p = 2; p <= world.size(); ++p) {
    if (world.size() % p != 0) continue;
    for (int k = 0; k < kCollectiveKinds; ++k) {
      ASSERT_TRUE(c.machine.links.count({k, p})) << collective_kind_name(static_cast<CollectiveKind>(k)) << " p " << p;
      EXPECT_GE(c.machine.links.at({k, p}).alpha_ms, 0);
      EXPECT_GE(c.machine.links.at({k, p}).ms_per_mb, 0);
    }
  }
  EXPECT_GT(c.machine.optimizer_ns_per_element, 0);
  world.barrier();
  if (world.rank() == 0) std::remove(path.c_str());
}

}  // namespace
}  // namespace sm
