// onednn_conv.cpp — float 2-D convolution through oneDNN 2.6 (forward with the
// forward_training hint, backward data, backward weights + bias), see conv.h.
//
// Layouts: callers hold plain nchw / oihw tensors. For each direction the primitive may pick
// blocked layouts (format_tag::any); its inputs are then reordered in and its outputs out
// through temporaries from the caching allocator. Blocked layouts measured ~1.3-1.5x faster
// on AVX-512 for VGG shapes (reorders cost ~1-2% of the convolution); the one exception is
// backward data with very few input channels (first layer), which stays plain.
// Weight/bias gradients accumulate: the primitive writes a temporary and a reorder with a
// sum post-op adds it into the caller's dw.
// Primitives are created once per (direction, geometry, bias) and shared process-wide.
// Under a DyLayoutReuse scope (conv.h), backward data keeps its converted dy for backward
// weights (Keep::Offer / Keep::Take below).
#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cpu/conv.h"
#include "spikemesh/kernels/cpu/onednn.h"

namespace sm::cpu {
namespace {

using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// A primitive argument: the caller's plain layout and the primitive's layout.
struct Operand {
  md user, prim;
  bool reorder = false;
  dnnl::reorder convert;  // user -> prim for inputs, prim -> user for outputs
};

Operand make_input(const md& user, const md& prim) {
  Operand op{user, prim, user != prim, {}};
  if (op.reorder)
    op.convert = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), user, dnnl_engine(), prim));
  return op;
}

Operand make_output(const md& user, const md& prim) {
  Operand op{user, prim, user != prim, {}};
  if (op.reorder)
    op.convert = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), prim, dnnl_engine(), user));
  return op;
}

// Memory bound to an operand for one call; `temp` holds a reordered copy when needed.
struct Bound {
  dnnl::memory user, prim;
  Tensor temp;
};

Tensor temp_for(const md& d) {
  const int64_t floats = static_cast<int64_t>((d.get_size() + sizeof(float) - 1) / sizeof(float));
  return Tensor::empty({floats}, DType::F32);
}
}  // namespace

// Converted inputs kept by a DyLayoutReuse scope, keyed by (caller's pointer, layout).
struct DyLayoutReuse::Kept {
  struct Entry {
    const void* user;
    md prim;
    Tensor converted;
  };
  std::vector<Entry> entries;

  void offer(const void* user, const md& prim, const Tensor& converted) {  // replaces one of the same key
    take(user, prim);
    entries.push_back({user, prim, converted});
  }
  Tensor take(const void* user, const md& prim) {  // undefined when none is kept
    for (auto it = entries.begin(); it != entries.end(); ++it)
      if (it->user == user && it->prim == prim) {
        Tensor t = std::move(it->converted);
        entries.erase(it);
        return t;
      }
    return Tensor();
  }
};

namespace {
thread_local DyLayoutReuse::Kept* t_kept = nullptr;  // the calling thread's innermost scope
}

DyLayoutReuse::DyLayoutReuse() : kept_(std::make_unique<Kept>()), outer_(t_kept) { t_kept = kept_.get(); }
DyLayoutReuse::~DyLayoutReuse() { t_kept = outer_; }

namespace {
// Offer: keep the converted copy in the thread's DyLayoutReuse scope (if any); Take: use a
// copy kept there for the same pointer and layout instead of converting.
enum class Keep { No, Offer, Take };

Bound bind_input(const Operand& op, const void* ptr, dnnl::stream& s, Keep keep = Keep::No) {
  Bound b;
  b.user = dnnl::memory(op.user, dnnl_engine(), const_cast<void*>(ptr));
  if (!op.reorder) {
    b.prim = b.user;
    return b;
  }
  if (keep == Keep::Take && t_kept) b.temp = t_kept->take(ptr, op.prim);
  const bool kept = b.temp.defined();
  if (!kept) b.temp = temp_for(op.prim);
  b.prim = dnnl::memory(op.prim, dnnl_engine(), b.temp.raw());
  if (kept) return b;
  op.convert.execute(s, b.user, b.prim);
  if (keep == Keep::Offer && t_kept) t_kept->offer(ptr, op.prim, b.temp);
  return b;
}

Bound bind_output(const Operand& op, void* ptr) {
  Bound b;
  b.user = dnnl::memory(op.user, dnnl_engine(), ptr);
  if (!op.reorder) {
    b.prim = b.user;
    return b;
  }
  b.temp = temp_for(op.prim);
  b.prim = dnnl::memory(op.prim, dnnl_engine(), b.temp.raw());
  return b;
}

void finish_output(const Operand& op, Bound& b, dnnl::stream& s) {
  if (op.reorder) op.convert.execute(s, b.prim, b.user);
}

struct Dims {
  dnnl::memory::dims src, wei, bias, dst, strides, pad;
  explicit Dims(const Conv2dGeometry& g)
      : src{g.batch, g.in_channels, g.height, g.width},
        wei{g.out_channels, g.in_channels, g.kernel, g.kernel},
        bias{g.out_channels},
        dst{g.batch, g.out_channels, g.out_height(), g.out_width()},
        strides{g.stride, g.stride},
        pad{g.padding, g.padding} {}
  md user_src() const { return md(src, dt::f32, tag::nchw); }
  md user_wei() const { return md(wei, dt::f32, tag::oihw); }
  md user_dst() const { return md(dst, dt::f32, tag::nchw); }
  md user_bias() const { return md(bias, dt::f32, tag::x); }
  md pick(const dnnl::memory::dims& d, bool blocked, tag plain) const {
    return md(d, dt::f32, blocked ? tag::any : plain);
  }
};

// Every convolution primitive takes its scratchpad from the caller (a tensor of our caching
// allocator, bound per call): oneDNN's own (library-mode) scratchpads are plain mallocs kept
// per thread at their largest size — up to ~200 MiB for the backward of a 3-channel 224²
// convolution — which counted in no allocator statistic and could not reuse freed pages.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// A scratchpad of `desc`'s size for one execution (an empty tensor when it needs none).
Tensor scratch_for(const md& desc, std::unordered_map<int, dnnl::memory>& args) {
  const size_t bytes = desc.get_size();
  if (bytes == 0) return Tensor();
  Tensor t = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::F32);
  args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(desc, dnnl_engine(), t.raw());
  return t;
}

enum Direction : int64_t { kForward = 0, kBackwardData = 1, kBackwardWeights = 2 };

std::vector<int64_t> cache_key(Direction dir, const Conv2dGeometry& g, bool bias, bool winograd = false) {
  return {dir,      g.batch,  g.in_channels, g.height,  g.width,
          g.out_channels, g.kernel, g.stride,  g.padding, bias ? 1 : 0, winograd ? 1 : 0};
}

bool blocked_layout(Direction dir, const Conv2dGeometry& g) {
  if (dir == kBackwardData && g.in_channels < 16) return false;
  return true;
}

// The forward descriptor (also the hint for both backward directions).
dnnl::convolution_forward::primitive_desc forward_pd(const Dims& d, bool blocked, bool bias,
                                                    dnnl::algorithm algo = dnnl::algorithm::convolution_direct) {
  auto src = d.pick(d.src, blocked, tag::nchw), wei = d.pick(d.wei, blocked, tag::oihw),
       dst = d.pick(d.dst, blocked, tag::nchw);
  auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src, wei,
                                                     d.user_bias(), dst, d.strides, d.pad, d.pad)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src, wei,
                                                     dst, d.strides, d.pad, d.pad);
  return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), dnnl_engine());
}

// make(winograd) when asked for and oneDNN has a Winograd kernel here, else make(direct).
template <class Make>
auto winograd_or_direct(bool winograd, Make&& make) {
  if (winograd) {
    try {
      return make(dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error&) {  // no Winograd kernel on this CPU / for this shape
    }
  }
  return make(dnnl::algorithm::convolution_direct);
}

struct ForwardEntry {
  dnnl::convolution_forward prim;
  Operand src, wei, dst;
  md bias, scratch;
};

struct BackwardDataEntry {
  dnnl::convolution_backward_data prim;
  Operand diff_dst, wei, diff_src;
  md scratch;
};

struct BackwardWeightsEntry {
  dnnl::convolution_backward_weights prim;
  Operand src, diff_dst;
  md diff_wei;            // the primitive's layout
  dnnl::reorder add_wei;  // diff_wei (prim layout) -> user oihw with dst += src
  md diff_bias, scratch;
};

template <class E>
DnnlCache<E>& cache() {
  static DnnlCache<E> c;
  return c;
}

}  // namespace

namespace {
void forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y, bool winograd) {
  const bool has_bias = bias != nullptr;
  std::shared_ptr<const ForwardEntry> e;
  SM_DNNL_CHECK("conv2d forward primitive creation", e = cache<ForwardEntry>().get(cache_key(kForward, g, has_bias, winograd), [&] {
    Dims d(g);
    auto pd = winograd_or_direct(winograd, [&](dnnl::algorithm a) {
      return forward_pd(d, blocked_layout(kForward, g), has_bias, a);
    });
    note_dnnl_implementation("conv2d forward", pd.impl_info_str());
    return ForwardEntry{dnnl::convolution_forward(pd), make_input(d.user_src(), pd.src_desc()),
                        make_input(d.user_wei(), pd.weights_desc()),
                        make_output(d.user_dst(), pd.dst_desc()), d.user_bias(), pd.scratchpad_desc()};
  }));
  auto& s = dnnl_stream();
  SM_DNNL_CHECK("conv2d forward", {
    Bound src = bind_input(e->src, x, s), wei = bind_input(e->wei, w, s), dst = bind_output(e->dst, y);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src.prim}, {DNNL_ARG_WEIGHTS, wei.prim}, {DNNL_ARG_DST, dst.prim}};
    if (has_bias)
      args[DNNL_ARG_BIAS] = dnnl::memory(e->bias, dnnl_engine(), const_cast<float*>(bias));
    const Tensor scratch = scratch_for(e->scratch, args);
    e->prim.execute(s, args);
    finish_output(e->dst, dst, s);
    s.wait();
  });
}

}  // namespace

void conv2d_forward_dnnl(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  forward(g, x, w, bias, y, false);
}

namespace {
// The Winograd kernels' scratchpad holds the transformed tiles of a whole call's input and
// output (36 floats per 4×4 output tile and channel: 2.25× the plane where 4 divides it, 4×
// on 6×6, where half of each tile is padding): ~100 MB for a VGG layer at T·N = 40 or one of
// Spikformer's stem layers at 8 samples. They run over chunks of samples instead (the passes
// are per-sample; the weight gradient accumulates chunk by chunk), as many samples as keep the
// transformed tiles near 64 MB. Each chunk transforms the weights again (36·Cin·Cout floats),
// so small chunks cost the wide layers most: 512→512 on 12×12 at T·N 40 took 53 and 41 ms for
// the input and weight gradients in one chunk, 87 and 71 ms in chunks of 8 (`spikemesh bench
// --kernel winograd`, 2 threads); the VGG's peak RSS rose 470 → 562 MB with it.
// The chunks are as equal as the batch allows (40 samples at most 16 a chunk: 14 + 14 + 12, not
// 16 + 16 + 8), so that no short last chunk leaves a thread idle.
int64_t winograd_chunk(const Conv2dGeometry& g) {
  const int64_t tiles = (g.out_height() + 3) / 4 * ((g.out_width() + 3) / 4);
  const double per_sample = 36.0 * 4.0 * static_cast<double>(g.in_channels + g.out_channels) * static_cast<double>(tiles);
  const int64_t batch = std::max<int64_t>(g.batch, 1);
  const int64_t most = std::clamp<int64_t>(static_cast<int64_t>(64.0 * (1 << 20) / per_sample), 1, batch);
  const int64_t chunks = (batch + most - 1) / most;
  return (batch + chunks - 1) / chunks;
}

template <class F>
void over_winograd_chunks(const Conv2dGeometry& g, F&& run_chunk) {  // run_chunk(chunk geometry, first sample)
  const int64_t chunk = winograd_chunk(g);
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    Conv2dGeometry c = g;
    c.batch = std::min(chunk, g.batch - n0);
    run_chunk(c, n0);
  }
}
}  // namespace

void conv2d_forward_winograd_dnnl(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                                  float* y) {
  const int64_t in_step = g.input_numel() / g.batch, out_step = g.output_numel() / g.batch;
  over_winograd_chunks(g, [&](const Conv2dGeometry& c, int64_t n0) {
    forward(c, x + n0 * in_step, w, bias, y + n0 * out_step, true);
  });
}

namespace {
void backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx, bool winograd) {
  std::shared_ptr<const BackwardDataEntry> e;
  SM_DNNL_CHECK("conv2d backward-data primitive creation", e = cache<BackwardDataEntry>().get(cache_key(kBackwardData, g, false, winograd), [&] {
    Dims d(g);
    const bool blocked = blocked_layout(kBackwardData, g);
    auto hint = forward_pd(d, blocked, false);
    auto pd = winograd_or_direct(winograd, [&](dnnl::algorithm algo) {
      dnnl::convolution_backward_data::desc desc(algo, d.pick(d.src, blocked, tag::nchw),
                                                 d.pick(d.wei, blocked, tag::oihw), d.pick(d.dst, blocked, tag::nchw),
                                                 d.strides, d.pad, d.pad);
      return dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), dnnl_engine(), hint);
    });
    note_dnnl_implementation("conv2d backward data", pd.impl_info_str());
    return BackwardDataEntry{dnnl::convolution_backward_data(pd),
                             make_input(d.user_dst(), pd.diff_dst_desc()),
                             make_input(d.user_wei(), pd.weights_desc()),
                             make_output(d.user_src(), pd.diff_src_desc()), pd.scratchpad_desc()};
  }));
  auto& s = dnnl_stream();
  SM_DNNL_CHECK("conv2d backward data", {
    Bound ddst = bind_input(e->diff_dst, dy, s, Keep::Offer), wei = bind_input(e->wei, w, s),
          dsrc = bind_output(e->diff_src, dx);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_DIFF_DST, ddst.prim}, {DNNL_ARG_WEIGHTS, wei.prim}, {DNNL_ARG_DIFF_SRC, dsrc.prim}};
    const Tensor scratch = scratch_for(e->scratch, args);
    e->prim.execute(s, args);
    finish_output(e->diff_src, dsrc, s);
    s.wait();
  });
}

}  // namespace

void conv2d_backward_data_dnnl(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  backward_data(g, dy, w, dx, false);
}

void conv2d_backward_data_winograd_dnnl(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  const int64_t in_step = g.input_numel() / g.batch, out_step = g.output_numel() / g.batch;
  over_winograd_chunks(g, [&](const Conv2dGeometry& c, int64_t n0) {
    backward_data(c, dy + n0 * out_step, w, dx + n0 * in_step, true);
  });
}

bool conv2d_winograd_available(const Conv2dGeometry& g) {
  if (g.kernel != 3 || g.stride != 1) return false;
  static DnnlCache<bool> probes;  // per geometry: did oneDNN give a Winograd primitive?
  std::shared_ptr<const bool> ok = probes.get(cache_key(kBackwardData, g, false, true), [&] {
    try {
      Dims d(g);
      auto hint = forward_pd(d, true, false);
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_winograd, d.pick(d.src, true, tag::nchw),
                                                 d.pick(d.wei, true, tag::oihw), d.pick(d.dst, true, tag::nchw),
                                                 d.strides, d.pad, d.pad);
      dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), dnnl_engine(), hint);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  });
  return *ok;
}

namespace {
std::shared_ptr<const BackwardWeightsEntry> weights_entry(const Conv2dGeometry& g, bool has_bias, bool winograd) {
  std::shared_ptr<const BackwardWeightsEntry> e;
  SM_DNNL_CHECK("conv2d backward-weights primitive creation", e = cache<BackwardWeightsEntry>().get(cache_key(kBackwardWeights, g, has_bias, winograd), [&] {
    Dims d(g);
    const bool blocked = blocked_layout(kBackwardWeights, g);
    auto hint = forward_pd(d, blocked, has_bias);
    auto src = d.pick(d.src, blocked, tag::nchw), wei = d.pick(d.wei, blocked, tag::oihw),
         dst = d.pick(d.dst, blocked, tag::nchw);
    auto pd = winograd_or_direct(winograd, [&](dnnl::algorithm algo) {
      auto desc = has_bias ? dnnl::convolution_backward_weights::desc(algo, src, wei, d.user_bias(), dst, d.strides,
                                                                      d.pad, d.pad)
                           : dnnl::convolution_backward_weights::desc(algo, src, wei, dst, d.strides, d.pad, d.pad);
      return dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad(), dnnl_engine(), hint);
    });
    note_dnnl_implementation("conv2d backward weights", pd.impl_info_str());
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(sum);
    dnnl::reorder add(dnnl::reorder::primitive_desc(dnnl_engine(), pd.diff_weights_desc(),
                                                    dnnl_engine(), d.user_wei(), attr));
    return BackwardWeightsEntry{dnnl::convolution_backward_weights(pd),
                                make_input(d.user_src(), pd.src_desc()),
                                make_input(d.user_dst(), pd.diff_dst_desc()),
                                pd.diff_weights_desc(), add, d.user_bias(), pd.scratchpad_desc()};
  }));
  return e;
}

// The channel block of an input layout: 16 for nChw16c, 8 for nChw8c, 0 for any other.
int64_t channel_block(const md& d) {
  const dnnl::memory::dims dims = d.dims();
  for (const auto& [block, t] : {std::pair<int64_t, tag>{16, tag::nChw16c}, {8, tag::nChw8c}})
    if (d == md(dims, dt::f32, t)) return block;
  return 0;
}

// The weight gradient's input: floats x, or spikes as bits (bitpack.h; samples from `first`
// of the whole batch's bits) unpacked straight into a channel-blocked primitive layout.
struct WeightsInput {
  const float* x = nullptr;
  const uint8_t* bits = nullptr;
  int64_t first = 0;
};

Bound bind_weights_input(const Operand& op, const Conv2dGeometry& g, const WeightsInput& in, dnnl::stream& s) {
  if (!in.bits) return bind_input(op, in.x, s);
  Bound b;  // (conv2d_backward_weights_bits_dnnl checked that the layout is channel-blocked)
  b.temp = temp_for(op.prim);
  SM_CHECK(unpack_bits_channel_blocked(in.bits, in.first, g.batch, g.in_channels, g.height * g.width,
                                       channel_block(op.prim), b.temp.data<float>()),
           "conv2d backward weights: spike bits do not fit the primitive's input layout");
  b.prim = dnnl::memory(op.prim, dnnl_engine(), b.temp.raw());
  return b;
}

void backward_weights(const Conv2dGeometry& g, const WeightsInput& in, const float* dy, float* dw, float* dbias,
                      bool winograd) {
  const bool has_bias = dbias != nullptr;
  const std::shared_ptr<const BackwardWeightsEntry> e = weights_entry(g, has_bias, winograd);
  auto& s = dnnl_stream();
  SM_DNNL_CHECK("conv2d backward weights", {
    Bound src = bind_weights_input(e->src, g, in, s), ddst = bind_input(e->diff_dst, dy, s, Keep::Take);
    Tensor wtemp = temp_for(e->diff_wei);
    dnnl::memory dwei_prim(e->diff_wei, dnnl_engine(), wtemp.raw());
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src.prim}, {DNNL_ARG_DIFF_DST, ddst.prim}, {DNNL_ARG_DIFF_WEIGHTS, dwei_prim}};
    Tensor btemp;
    if (has_bias) {
      btemp = Tensor::empty({g.out_channels}, DType::F32);
      args[DNNL_ARG_DIFF_BIAS] = dnnl::memory(e->diff_bias, dnnl_engine(), btemp.raw());
    }
    const Tensor scratch = scratch_for(e->scratch, args);
    e->prim.execute(s, args);
    dnnl::memory dw_user(Dims(g).user_wei(), dnnl_engine(), dw);
    e->add_wei.execute(s, dwei_prim, dw_user);
    s.wait();
    if (has_bias) {
      const float* b = btemp.data<float>();
      for (int64_t c = 0; c < g.out_channels; ++c) dbias[c] += b[c];
    }
  });
}

}  // namespace

void conv2d_backward_weights_dnnl(const Conv2dGeometry& g, const float* x, const float* dy, float* dw, float* dbias) {
  backward_weights(g, WeightsInput{x}, dy, dw, dbias, false);
}

void conv2d_backward_weights_winograd_dnnl(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                           float* dbias) {
  const int64_t in_step = g.input_numel() / g.batch, out_step = g.output_numel() / g.batch;
  over_winograd_chunks(g, [&](const Conv2dGeometry& c, int64_t n0) {
    backward_weights(c, WeightsInput{x + n0 * in_step}, dy + n0 * out_step, dw, dbias, true);
  });
}

bool conv2d_backward_weights_bits_dnnl(const Conv2dGeometry& g, const uint8_t* x_bits, const float* dy, float* dw,
                                       float* dbias, bool winograd) {
  const int64_t chunk = winograd ? winograd_chunk(g) : g.batch;
  Conv2dGeometry first = g;
  first.batch = std::min(chunk, g.batch);  // every chunk's primitive has the same layouts
  const Operand& src = weights_entry(first, dbias != nullptr, winograd)->src;
  if (!channel_blocked_unpack_fits(g.in_channels, g.height * g.width, channel_block(src.prim))) return false;
  const int64_t out_step = g.output_numel() / g.batch;
  auto run = [&](const Conv2dGeometry& c, int64_t n0) {
    backward_weights(c, WeightsInput{nullptr, x_bits, n0}, dy + n0 * out_step, dw, dbias, winograd);
  };
  if (winograd)
    over_winograd_chunks(g, run);
  else
    run(g, 0);
  return true;
}

}  // namespace sm::cpu
