// weight_layer.cpp — WeightLayer's CPU hooks: the flow of weight_layer_flow.h with the CPU
// kernels (kernels/cpu/conv.h, gemm.h): float through oneDNN, double through the own
// deterministic kernels. The input is kept as a SavedActivation (bits for spikes); the
// forward kernel adds the bias itself unless the rowwise reduction must come first.
#include <chrono>
#include <sstream>
#include <type_traits>

#include "spikemesh/core/bitpack.h"
#include "spikemesh/kernels/cpu/conv.h"
#include "spikemesh/kernels/cpu/gemm.h"
#include "spikemesh/kernels/cpu/spike_conv.h"
#include "spikemesh/kernels/cpu/winograd.h"
#include "spikemesh/kernels/spike_conv_choice.h"
#include "spikemesh/layers/layer_profile.h"
#include "weight_layer_flow.h"

namespace sm {
namespace {

using Family = WeightLayer::KernelFamily;
using Geometry = cpu::Conv2dGeometry;

// Calls f(T{}) with T = float or double for dt.
template <typename F>
void dispatch_real(DType dt, F&& f) {
  if (dt == DType::F32)
    f(float{});
  else
    f(double{});
}

template <typename T>
const T* data_or_null(const Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

// The geometry the binary-input kernel sees: a 1×1 convolution over tokens [batch, Cin, L]
// as one row of L pixels (rows are its unit of work), a 2-D one as it is.
Geometry spike_geometry(Family k, const Geometry& g) {
  if (k != Family::Conv1x1) return g;
  Geometry r = g;
  r.width = g.height * g.width;
  r.height = 1;
  return r;
}

std::string geometry_text(const Geometry& g) {
  std::ostringstream os;
  os << g.in_channels << "->" << g.out_channels << " " << g.height << "x" << g.width << " k" << g.kernel;
  if (g.stride != 1) os << " s" << g.stride;
  return os.str();
}

// Whether an f32 input may go to the binary-input kernel (spike_conv_choice.h): a spike
// tensor into a convolution, unless the mode says dense and no profile wants its firing rate.
bool spike_kernel_candidate(Family k, bool binary) {
  return binary && k != Family::Matmul && (spike_conv_algo() != SpikeConvAlgo::Dense || layer_profile_enabled());
}

// Runs `sparse` or `dense` for a spike input of firing rate `density`: the binary-input
// kernel when the mode/firing rate say so; the choice is recorded for `bench --profile`.
template <typename Sparse, typename Dense>
void run_maybe_sparse(const std::string& layer, Family k, ConvPass pass, const Geometry& g, double density,
                      Sparse&& sparse, Dense&& dense) {
  const bool timed = layer_profile_enabled();
  const Geometry sg = spike_geometry(k, g);
  const bool use_sparse = use_spike_kernel(pass, sg, density);
  const auto t0 = std::chrono::steady_clock::now();
  if (use_sparse)
    sparse(sg);
  else
    dense();
  if (timed) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    layer_profile_spike_conv(layer, geometry_text(sg), pass == ConvPass::Forward, density, use_sparse, ms,
                             spike_conv_crossover(pass, sg));
  }
}

struct CpuKernels {
  using Act = SavedActivation;
  static constexpr bool kKernelAddsBias = true;
  SlotStore<WeightSaved<Act>>& store;
  const std::string& layer;  // the layer's name (profile rows)
  Tensor input_bits;         // forward: the spike input's bits, made once for the kernel and the slot
  const void* input_bits_of = nullptr;

  SlotStore<WeightSaved<Act>>& slots() { return store; }
  Act save_input(const Tensor& x) {
    if (input_bits.defined() && x.raw() == input_bits_of && x.is_binary() && input_bits.numel() == (x.numel() + 7) / 8)
      return Act::save_packed(x, input_bits);
    return Act::save(x);
  }

  void check(const Tensor& x, const Tensor& w, const std::string& what) {
    SM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
             what << " supports f32/f64, got " << dtype_name(x.dtype()));
    SM_CHECK(w.dtype() == x.dtype(), what << " weight is " << dtype_name(w.dtype()) << ", input is "
                                           << dtype_name(x.dtype()));
  }

  void forward(Family k, const Geometry& g, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
    dispatch_real(x.dtype(), [&](auto t) {
      using T = decltype(t);
      const T *px = x.data<T>(), *pw = w.data<T>(), *pb = data_or_null<T>(bias);
      T* py = y.data<T>();
      auto dense = [&] {
        if constexpr (std::is_same_v<T, float>) {
          const WinogradKernel wk = k == Family::Conv ? winograd_kernel(g, WinogradPass::Forward) : WinogradKernel::None;
          if (wk == WinogradKernel::OneDnn) return cpu::conv2d_forward_winograd_dnnl(g, px, pw, pb, py);
          if (wk == WinogradKernel::Own) return cpu::conv2d_forward_winograd_f4(g, px, pw, pb, py);
        }
        if (k == Family::Conv) cpu::conv2d_forward<T>(g, px, pw, pb, py);
        if (k == Family::Conv1x1)
          cpu::conv1x1_forward<T>(g.batch, g.in_channels, g.out_channels, g.height, px, pw, pb, py);
        if (k == Family::Matmul) cpu::linear_forward<T>(g.batch, g.in_channels, g.out_channels, px, pw, pb, py);
      };
      if constexpr (std::is_same_v<T, float>) {
        if (!spike_kernel_candidate(k, x.is_binary())) return dense();
        input_bits = pack_bits(x);  // the slot keeps them too (save_input)
        input_bits_of = x.raw();
        const uint8_t* bits = input_bits.data<uint8_t>();
        run_maybe_sparse(layer, k, ConvPass::Forward, g, cpu::set_bit_fraction(bits, x.numel()),
                         [&](const Geometry& sg) { cpu::spike_conv2d_forward_bits(sg, bits, pw, pb, py); }, dense);
      } else {
        dense();
      }
    });
  }

  void backward_data(Family k, const Geometry& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
    dispatch_real(dy.dtype(), [&](auto t) {
      using T = decltype(t);
      const T *pdy = dy.data<T>(), *pw = w.data<T>();
      T* pdx = dx.data<T>();
      if constexpr (std::is_same_v<T, float>) {
        const WinogradKernel wk = k == Family::Conv ? winograd_kernel(g, WinogradPass::Data) : WinogradKernel::None;
        if (wk == WinogradKernel::OneDnn) return cpu::conv2d_backward_data_winograd_dnnl(g, pdy, pw, pdx);
        if (wk == WinogradKernel::Own) return cpu::conv2d_backward_data_winograd_f4(g, pdy, pw, pdx);
      }
      if (k == Family::Conv) cpu::conv2d_backward_data<T>(g, pdy, pw, pdx);
      if (k == Family::Conv1x1)
        cpu::conv1x1_backward_data<T>(g.batch, g.in_channels, g.out_channels, g.height, pdy, pw, pdx);
      if (k == Family::Matmul) cpu::linear_backward_data<T>(g.batch, g.in_channels, g.out_channels, pdy, pw, pdx);
    });
  }

  // W from the kept input: a spike input's bits straight into the binary-input kernel when it
  // is chosen, else the input unpacked for the dense one.
  void backward_weights_saved(Family k, const Geometry& g, const Act& in, const Tensor& dy, Param& w, Param* b) {
    if (!in.packed() || in.dtype() != DType::F32 || !spike_kernel_candidate(k, true))
      return backward_weights(k, g, in.restore(), dy, w, b);
    const uint8_t* bits = in.bits().data<uint8_t>();
    float *pdw = w.grad.data<float>(), *pdb = b ? b->grad.data<float>() : nullptr;
    run_maybe_sparse(
        layer, k, ConvPass::Weights, g, cpu::set_bit_fraction(bits, shape_numel(in.shape())),
        [&](const Geometry& sg) { cpu::spike_conv2d_backward_weights_bits(sg, bits, dy.data<float>(), pdw, pdb); },
        [&] {
          if (!dense_weights_from_bits(k, g, bits, dy, pdw, pdb)) dense_weights<float>(k, g, in.restore(), dy, pdw, pdb);
        });
  }

  // The dense weight gradient of a convolution (any K) through oneDNN (direct or its
  // Winograd) with the spike bits unpacked straight into its blocked input; false where that
  // does not apply (the caller unpacks, then runs dense_weights).
  static bool dense_weights_from_bits(Family k, const Geometry& g, const uint8_t* bits, const Tensor& dy, float* pdw,
                                      float* pdb) {
    if (k != Family::Conv) return false;
    const WinogradKernel wk = winograd_kernel(g, WinogradPass::Weights);
    return wk != WinogradKernel::Own &&
           cpu::conv2d_backward_weights_bits_dnnl(g, bits, dy.data<float>(), pdw, pdb, wk == WinogradKernel::OneDnn);
  }

  template <typename T>
  static void dense_weights(Family k, const Geometry& g, const Tensor& x, const Tensor& dy, T* pdw, T* pdb) {
    const T *px = x.data<T>(), *pdy = dy.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      const WinogradKernel wk = k == Family::Conv ? winograd_kernel(g, WinogradPass::Weights) : WinogradKernel::None;
      if (wk == WinogradKernel::OneDnn) return cpu::conv2d_backward_weights_winograd_dnnl(g, px, pdy, pdw, pdb);
      if (wk == WinogradKernel::Own) return cpu::conv2d_backward_weights_winograd_f4(g, px, pdy, pdw, pdb);
    }
    if (k == Family::Conv) cpu::conv2d_backward_weights<T>(g, px, pdy, pdw, pdb);
    if (k == Family::Conv1x1)
      cpu::conv1x1_backward_weights<T>(g.batch, g.in_channels, g.out_channels, g.height, px, pdy, pdw, pdb);
    if (k == Family::Matmul) cpu::linear_backward_weights<T>(g.batch, g.in_channels, g.out_channels, px, pdy, pdw, pdb);
  }

  void backward_weights(Family k, const Geometry& g, const Tensor& x, const Tensor& dy, Param& w, Param* b) {
    dispatch_real(x.dtype(), [&](auto t) {
      using T = decltype(t);
      T *pdw = w.grad.data<T>(), *pdb = b ? b->grad.data<T>() : nullptr;
      if constexpr (std::is_same_v<T, float>) {
        if (spike_kernel_candidate(k, x.is_binary())) {
          const float *px = x.data<float>(), *pdy = dy.data<float>();
          run_maybe_sparse(
              layer, k, ConvPass::Weights, g, cpu::nonzero_fraction(px, x.numel()),
              [&](const Geometry& sg) { cpu::spike_conv2d_backward_weights(sg, px, pdy, pdw, pdb); },
              [&] { dense_weights<float>(k, g, x, dy, pdw, pdb); });
          return;
        }
      }
      dense_weights<T>(k, g, x, dy, pdw, pdb);
    });
  }
};

CpuKernels cpu_kernels(std::shared_ptr<void>& impl, const std::string& layer) {
  if (!impl) impl = std::make_shared<SlotStore<WeightSaved<SavedActivation>>>();
  return CpuKernels{*static_cast<SlotStore<WeightSaved<SavedActivation>>*>(impl.get()), layer, Tensor(), nullptr};
}

}  // namespace

Shape WeightLayer::gathered_shape(Shape local, int tp) const {
  // channels: dim 2 of a convolution's [T, N, C, ...], the last dim of a linear's [..., F]
  local[kernels() == KernelFamily::Matmul ? local.size() - 1 : 2] *= tp;
  return local;
}

Tensor WeightLayer::forward_cpu(const Tensor& x, Ctx& ctx) {
  CpuKernels k = cpu_kernels(impl_, name());
  return forward_on(k, x, ctx);
}

Tensor WeightLayer::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  CpuKernels k = cpu_kernels(impl_, name());
  const cpu::DyLayoutReuse reuse;  // the weight gradient (unless split off) reads the dy the input gradient did
  return backward_input_on(k, dy, ctx);
}

void WeightLayer::backward_weight_cpu(Ctx& ctx) {
  CpuKernels k = cpu_kernels(impl_, name());
  backward_weight_on(k, ctx);
}

}  // namespace sm
