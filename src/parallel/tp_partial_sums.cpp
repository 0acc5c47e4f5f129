// tp_partial_sums.cpp — the per-unit tp sums of partial gradients (parallel/tp_partial_sums.h).
#include "spikemesh/parallel/tp_partial_sums.h"

#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/param.h"

namespace sm {

TpPartialSums::TpPartialSums(UnitHooks* inner, Collectives& tp, std::vector<std::vector<TpPartialParam>> by_unit)
    : inner_(inner), tp_(tp), by_unit_(std::move(by_unit)) {}

bool TpPartialSums::empty() const {
  for (const auto& u : by_unit_)
    if (!u.empty()) return false;
  return true;
}

void TpPartialSums::after_backward(size_t unit) {
  if (last_ && unit < by_unit_.size())
    for (const TpPartialParam& p : by_unit_[unit])
      if (!p.region || p.region->any_sharded()) tp_.all_reduce_sum(p.param->grad);  // collective over tp
  inner_->after_backward(unit);
}

}  // namespace sm
