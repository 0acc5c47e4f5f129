// bn_ref.cpp — naive batch-norm reference (see bn_ref.h).
#include "bn_ref.h"

#include <cmath>

namespace sm {
namespace ref {
namespace {

double at(const std::vector<double>& v, int64_t b, int64_t c, int64_t s, int64_t C, int64_t S) {
  return v[(b * C + c) * S + s];
}

void channel_stats(const std::vector<double>& x, int64_t B, int64_t C, int64_t S,
                   std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(C, 0.0);
  var.assign(C, 0.0);
  const double n = static_cast<double>(B * S);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < S; ++k) s += at(x, b, c, k, C, S);
    mean[c] = s / n;
    double q = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < S; ++k) {
        const double d = at(x, b, c, k, C, S) - mean[c];
        q += d * d;
      }
    var[c] = q / n;
  }
}

}  // namespace

BnRefForward bn_forward_train_ref(const std::vector<double>& x, int64_t B, int64_t C, int64_t S,
                                  const std::vector<double>& gamma, const std::vector<double>& beta,
                                  double eps) {
  BnRefForward r;
  channel_stats(x, B, C, S, r.mean, r.var);
  r.y = bn_forward_eval_ref(x, B, C, S, gamma, beta, r.mean, r.var, eps);
  return r;
}

std::vector<double> bn_forward_eval_ref(const std::vector<double>& x, int64_t B, int64_t C, int64_t S,
                                        const std::vector<double>& gamma, const std::vector<double>& beta,
                                        const std::vector<double>& mean, const std::vector<double>& var,
                                        double eps) {
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < S; ++k) {
        const int64_t i = (b * C + c) * S + k;
        y[i] = (x[i] - mean[c]) / std::sqrt(var[c] + eps) * gamma[c] + beta[c];
      }
  return y;
}

void bn_update_running_ref(std::vector<double>& running_mean, std::vector<double>& running_var,
                           const std::vector<double>& mean, const std::vector<double>& biased_var,
                           int64_t count, double momentum) {
  for (size_t c = 0; c < mean.size(); ++c) {
    const double unbiased = biased_var[c] * static_cast<double>(count) / static_cast<double>(count - 1);
    running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1 - momentum) * running_var[c] + momentum * unbiased;
  }
}

BnRefBackward bn_backward_train_ref(const std::vector<double>& x, const std::vector<double>& dy,
                                    int64_t B, int64_t C, int64_t S, const std::vector<double>& gamma,
                                    double eps) {
  std::vector<double> mean, var;
  channel_stats(x, B, C, S, mean, var);
  const double n = static_cast<double>(B * S);
  BnRefBackward r;
  r.dx.assign(x.size(), 0.0);
  r.dgamma.assign(C, 0.0);
  r.dbeta.assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    const double sd = std::sqrt(var[c] + eps);
    // Stage 1: dγ, dβ, and d loss/d σ², d loss/d μ through x̂ = (x - μ)/sd.
    double dvar = 0, dmean = 0, sum_xm = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < S; ++k) {
        const double xv = at(x, b, c, k, C, S), g = at(dy, b, c, k, C, S);
        const double xhat = (xv - mean[c]) / sd;
        r.dgamma[c] += g * xhat;
        r.dbeta[c] += g;
        const double dxhat = g * gamma[c];
        dvar += dxhat * (xv - mean[c]) * -0.5 * std::pow(var[c] + eps, -1.5);
        dmean += -dxhat / sd;
        sum_xm += -2.0 * (xv - mean[c]);
      }
    dmean += dvar * sum_xm / n;
    // Stage 2: dx = dx̂/sd + dσ²·2(x-μ)/n + dμ/n.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < S; ++k) {
        const int64_t i = (b * C + c) * S + k;
        r.dx[i] = dy[i] * gamma[c] / sd + dvar * 2.0 * (x[i] - mean[c]) / n + dmean / n;
      }
  }
  return r;
}

}  // namespace ref
}  // namespace sm
