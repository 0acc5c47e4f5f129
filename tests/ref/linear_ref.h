// linear_ref.h — naive double-precision Linear and matrix product (tests only).
// x [M, Fin], w [Fout, Fin], bias [Fout] (empty = none), y [M, Fout].
#pragma once
#include <cstdint>
#include <vector>

namespace sm::ref {

std::vector<double> linear_forward(int64_t M, int64_t fin, int64_t fout, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& bias);
std::vector<double> linear_backward_data(int64_t M, int64_t fin, int64_t fout,
                                         const std::vector<double>& dy, const std::vector<double>& w);
std::vector<double> linear_backward_weights(int64_t M, int64_t fin, int64_t fout,
                                            const std::vector<double>& x, const std::vector<double>& dy);
std::vector<double> linear_backward_bias(int64_t M, int64_t fout, const std::vector<double>& dy);

// C [M, N] = A [M, K] · B [K, N], all row-major.
std::vector<double> matmul(int64_t M, int64_t N, int64_t K, const std::vector<double>& a,
                           const std::vector<double>& b);

}  // namespace sm::ref
