// precision.cpp — --precision parsing and the dynamic loss scaler (core/precision.h).
#include "spikemesh/core/precision.h"

#include <algorithm>
#include <cmath>

#include "spikemesh/core/enum_names.h"
#include "spikemesh/core/error.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/core/tensor_cuda.h"
#endif

namespace sm {

namespace {
const EnumName<Precision> kPrecisionNames[] = {
    {"fp32", Precision::FP32}, {"f32", Precision::FP32},      {"float32", Precision::FP32},
    {"fp64", Precision::FP64}, {"f64", Precision::FP64},      {"float64", Precision::FP64},
    {"bf16", Precision::BF16}, {"bfloat16", Precision::BF16}, {"fp16", Precision::FP16},
    {"f16", Precision::FP16},  {"float16", Precision::FP16}};
}  // namespace

Precision precision_from_name(const std::string& name) {
  if (auto p = enum_from_name(kPrecisionNames, ascii_lower(name))) return *p;
  SM_INPUT_ERROR("--precision " << name << ": unsupported precision (valid: fp32, bf16, fp16, fp64)");
}

const char* precision_name(Precision p) { return enum_name(kPrecisionNames, p); }

DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::FP32: return DType::F32;
    case Precision::FP64: return DType::F64;
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
  }
  return DType::F32;
}

DType master_dtype(Precision p) { return p == Precision::FP64 ? DType::F64 : DType::F32; }

void check_precision_for_device(Precision p, const Device& dev) {
  if (dev.is_cpu() && (p == Precision::BF16 || p == Precision::FP16))
    SM_INPUT_ERROR("--precision " << precision_name(p) << " runs on a GPU only (the CPU path runs fp32 or fp64); "
                                  << "use --device cuda or --precision fp32");
  if (dev.is_cuda() && p == Precision::FP64)
    SM_INPUT_ERROR("--precision fp64 runs on the CPU only (the exact reference); use --device cpu, or fp32, bf16 "
                   "or fp16 on " << dev.str());
}

LossScaler::LossScaler(const LossScalerConfig& c) : cfg_(c), scale_(c.dynamic ? c.init_scale : 1.0) {
  if (c.dynamic) {
    SM_CHECK(c.init_scale > 0 && std::isfinite(c.init_scale), "loss scale " << c.init_scale);
    SM_CHECK(c.growth_factor > 1 && c.backoff_factor > 0 && c.backoff_factor < 1 && c.growth_interval > 0,
             "loss scaler factors growth " << c.growth_factor << ", backoff " << c.backoff_factor << ", interval "
                                           << c.growth_interval);
  }
}

LossScaler LossScaler::for_precision(Precision p) {
  LossScalerConfig c;
  c.dynamic = p == Precision::FP16;
  return LossScaler(c);
}

bool LossScaler::unscale_and_check(const std::vector<Tensor*>& grads) {
  if (!cfg_.dynamic) return true;
  const double inv = 1.0 / scale_;
  bool finite = true;
  // Host gradients: in place, element by element.
  for (Tensor* g : grads) {
    if (!g || !g->defined() || g->device().is_cuda()) continue;
    SM_CHECK(g->dtype() == DType::F32 || g->dtype() == DType::F64, "loss scaling of "
                                                                         << dtype_name(g->dtype()) << " gradients");
    const int64_t n = g->numel();
    if (g->dtype() == DType::F32) {
      float* p = g->data<float>();
      const float fi = static_cast<float>(inv);
      for (int64_t i = 0; i < n; ++i) {
        p[i] *= fi;
        finite = finite && std::isfinite(p[i]);
      }
    } else {
      double* p = g->data<double>();
      for (int64_t i = 0; i < n; ++i) {
        p[i] *= inv;
        finite = finite && std::isfinite(p[i]);
      }
    }
  }
  // Device gradients: one kernel per tensor into one flag, one synchronisation.
  Device dev = Device::cpu();
  for (Tensor* g : grads) {
    if (!g || !g->defined() || !g->device().is_cuda()) continue;
    SM_CHECK(dev.is_cpu() || dev == g->device(), "loss scaling of gradients on two devices ("
                                                     << dev.str() << ", " << g->device().str() << ")");
    dev = g->device();
  }
  if (dev.is_cuda()) {
#ifdef SPIKEMESH_HAVE_CUDA
    if (!flag_.defined() || flag_.device() != dev) flag_ = Tensor::empty({1}, DType::I32, dev);
    flag_.zero();
    cuda::DeviceGuard guard(dev.ordinal);
    cudaStream_t s = cuda::stream_for(dev.ordinal);
    for (Tensor* g : grads) {
      if (!g || !g->defined() || !g->device().is_cuda()) continue;
      cuda::unscale_and_check(g->raw(), g->dtype(), g->numel(), inv, flag_.data<int32_t>(), s);
    }
    finite = finite && flag_.item() == 0.0;  // synchronises
#endif
  }
  return finite;
}

void LossScaler::update(bool finite) {
  if (!cfg_.dynamic) return;
  if (!finite) {
    ++skipped_;
    finite_in_row_ = 0;
    scale_ = std::max(cfg_.min_scale, scale_ * cfg_.backoff_factor);
    return;
  }
  if (++finite_in_row_ >= cfg_.growth_interval) {
    finite_in_row_ = 0;
    const double grown = scale_ * cfg_.growth_factor;
    if (std::isfinite(grown) && grown < 1e30) scale_ = grown;
  }
}

void LossScaler::set_state(double scale, int64_t finite_in_row, int64_t skipped) {
  SM_CHECK(scale > 0 && std::isfinite(scale), "loss scale " << scale);
  scale_ = scale;
  finite_in_row_ = finite_in_row;
  skipped_ = skipped;
}

}  // namespace sm
