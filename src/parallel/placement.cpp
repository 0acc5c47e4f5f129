// placement.cpp — flat ranges of tp-local parameters as placed pieces (placement.h).
#include "spikemesh/parallel/placement.h"

namespace sm {

std::vector<PlacedPiece> flat_range_pieces_of(const Param& p, int64_t begin, int64_t end, int64_t pos) {
  std::vector<PlacedPiece> out;
  for (const Box& b : param_range_boxes(p, begin, end)) {
    out.push_back(PlacedPiece{&p, b, pos});
    pos += b.numel();
  }
  return out;
}

}  // namespace sm
