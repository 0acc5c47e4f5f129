// checkpoint_fixture.h — the small model and optimizer the checkpoint tests (unit and MPI:
// test_checkpoint*.cpp, tests/mpi/test_io_checkpoint.cpp, test_checkpoint_damage.cpp) save and
// load: fmnist_csnn at a given width, finalised in f32 on the CPU, and Adam over its
// parameters with every state tensor optionally filled with one finite, non-zero value.
#pragma once
#include <memory>
#include <string>

#include "spikemesh/models/model.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/optim/optimizer.h"

namespace sm::test {

inline std::unique_ptr<Model> fmnist_model(uint64_t seed, const std::string& width = "C=4") {
  ModelSelection sel;
  sel.model = "fmnist_csnn";
  sel.vars = {width};
  auto m = sel.build();
  m->finalize(DType::F32, Device::cpu(), seed);
  return m;
}

// fill > 0: every optimizer state tensor set to it (so a checkpoint holds non-trivial state).
inline std::unique_ptr<Optimizer> adam_of(Model& m, double fill = 0) {
  OptimizerConfig oc;
  oc.name = "adam";
  auto o = make_optimizer(oc, m.params());
  if (fill > 0)
    for (const OptimState& s : o->state()) s.value->fill(fill);
  return o;
}

}  // namespace sm::test
