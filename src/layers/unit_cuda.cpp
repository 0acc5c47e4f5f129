// unit_cuda.cpp — Unit's CUDA additions: reset_state() and collect_stats() also reach the
// CUDA-side state of every neuron below the unit (Neuron::reset_state / collect_stats,
// defined with the CPU layer, see only the CPU state). A neuron that never ran on the GPU
// reports nothing here, so CPU runs are unchanged.
#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/unit.h"

namespace sm {
namespace {

template <typename F>
void for_each_neuron(Layer& l, F&& f) {
  if (auto* n = dynamic_cast<Neuron*>(&l)) f(*n);
  for (Layer* c : l.children()) for_each_neuron(*c, f);
}

}  // namespace

void Unit::reset_state() {
  Sequential::reset_state();
  for_each_neuron(*this, [](Neuron& n) { n.reset_cuda_state(); });
}

void Unit::collect_stats(std::vector<LayerStat>& out) const {
  Sequential::collect_stats(out);
  // children() is not const; walking it does not modify the unit.
  for_each_neuron(const_cast<Unit&>(*this), [&out](Neuron& n) { n.collect_cuda_stats(out); });
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
