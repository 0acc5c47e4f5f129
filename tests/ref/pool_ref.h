// pool_ref.h — naive double-precision 2-d pooling reference for tests only. Planes are
// flat vectors [P, H, W]. The input is first copied into an explicitly padded plane
// (-inf for max, 0 for avg) and windows are read from it — unlike the production kernel,
// which clips windows to the image.
#pragma once
#include <cstdint>
#include <vector>

namespace sm {
namespace ref {

struct PoolRefGeom {
  int64_t P = 1, H = 1, W = 1;
  int k = 2, stride = 2, pad = 0;
  int64_t Ho() const { return (H + 2 * pad - k) / stride + 1; }
  int64_t Wo() const { return (W + 2 * pad - k) / stride + 1; }
};

// Max pooling; the winner of a window is its first maximum in row-major order.
// dx is d loss/dx given dy (gradient routed to each window's winner, summed).
void maxpool2d_ref(const std::vector<double>& x, const PoolRefGeom& g, const std::vector<double>& dy,
                   std::vector<double>& y, std::vector<double>& dx);

// Average pooling with count_include_pad = true (divisor k·k).
void avgpool2d_ref(const std::vector<double>& x, const PoolRefGeom& g, const std::vector<double>& dy,
                   std::vector<double>& y, std::vector<double>& dx);

}  // namespace ref
}  // namespace sm
