// conv_cudnn_backend.cpp — cuDNN backend descriptors for the graph-API convolutions: tensors,
// the convolution, one direction's operation graph, heuristics results and engine properties
// (conv_cudnn_backend.h).
#if defined(SPIKEMESH_HAVE_CUDA) && defined(SPIKEMESH_HAVE_CUDNN)
#include "conv_cudnn_backend.h"

#include <algorithm>
#include <array>
#include <sstream>

#include "conv_cudnn_internal.h"

namespace sm {
namespace cuda {
namespace conv_backend {
namespace {

// [n, c, h, w] in `layout` (NHWC: channels innermost), `alignment` bytes.
Desc tensor_desc(int64_t uid, const std::array<int64_t, 4>& dims, cudnnDataType_t t, ConvLayout layout,
                 int64_t alignment) {
  const int64_t c = dims[1], h = dims[2], w = dims[3];
  const std::array<int64_t, 4> strides = layout == ConvLayout::NHWC ? std::array<int64_t, 4>{h * w * c, 1, w * c, c}
                                                                     : std::array<int64_t, 4>{c * h * w, h * w, w, 1};
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment)
      .finalize("tensor descriptor");
  return d;
}

Desc conv_desc(const cpu::Conv2dGeometry& g) {
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;  // f32 accumulation for f32, bf16, f16
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  const int64_t pad[2] = {g.padding, g.padding}, stride[2] = {g.stride, g.stride}, dilation[2] = {1, 1};
  Desc d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation)
      .finalize("convolution descriptor");
  return d;
}

unsigned note_bits(const std::vector<cudnnBackendNumericalNote_t>& notes) {
  unsigned bits = 0;
  for (cudnnBackendNumericalNote_t n : notes) {
    switch (n) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: bits |= kNoteTensorCore; break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: bits |= kNoteDownConvertInputs; break;
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: bits |= kNoteReducedPrecisionReduction; break;
      case CUDNN_NUMERICAL_NOTE_FFT: bits |= kNoteFft; break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: bits |= kNoteNondeterministic; break;
      case CUDNN_NUMERICAL_NOTE_WINOGRAD:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: bits |= kNoteWinograd; break;
      case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: bits |= kNoteStrictNanProp; break;
      default: break;
    }
  }
  return bits;
}

const char* knob_name(int type) {
  switch (type) {
    case 1: return "SWIZZLE";
    case 2: return "TILE_SIZE";
    case 4: return "EDGE";
    case 11: return "MULTIPLY";
    case 12: return "SPLIT_K_BUF";
    case 13: return "TILEK";
    case 14: return "STAGES";
    case 15: return "REDUCTION_MODE";
    case 17: return "SPLIT_K_SLC";
    case 18: return "IDX_MODE";
    case 23: return "SPECFILT";
    case 24: return "KERNEL_CFG";
    case 25: return "WORKSPACE";
    case 29: return "BLOCK_SIZE";
    case 30: return "OCCUPANCY";
    case 38: return "STREAM_K";
    case 40: return "TILE_M";
    case 41: return "TILE_N";
    default: return nullptr;
  }
}

}  // namespace

void must(cudnnStatus_t rc, const char* what) {
  if (rc == CUDNN_STATUS_SUCCESS) return;
  char detail[256] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string msg = std::string(what) + ": " + cudnnGetErrorString(rc);
  if (detail[0]) msg += std::string(" (") + detail + ")";
  throw PlanRefused(msg);
}

Graph build_graph(cudnnHandle_t h, ConvDirection dir, const cpu::Conv2dGeometry& g, DType dt, ConvLayout layout,
                  int64_t alignment, double beta) {
  const cudnnDataType_t t = conv_detail::cudnn_type(dt);
  Graph gr;
  gr.x = tensor_desc(kUidX, {g.batch, g.in_channels, g.height, g.width}, t, layout, alignment);
  gr.w = tensor_desc(kUidW, {g.out_channels, g.in_channels, g.kernel, g.kernel}, t, layout, alignment);
  gr.y = tensor_desc(kUidY, {g.batch, g.out_channels, g.out_height(), g.out_width()}, t, layout, alignment);
  gr.conv = conv_desc(g);
  const float alpha_f = 1.0f, beta_f = static_cast<float>(beta), zero_f = 0.0f;
  switch (dir) {
    case ConvDirection::Forward:
      gr.op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      gr.op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, gr.x)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, gr.w)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, gr.y)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, gr.conv)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha_f)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero_f);
      break;
    case ConvDirection::BackwardData:
      gr.op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      gr.op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, gr.x)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, gr.w)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, gr.y)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, gr.conv)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha_f)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &zero_f);
      break;
    case ConvDirection::BackwardFilter:
      gr.op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
      gr.op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, gr.x)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, gr.w)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, gr.y)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, gr.conv)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha_f)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta_f);
      break;
  }
  gr.op.finalize("convolution operation");
  gr.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t ops[1] = {gr.op.get()};
  gr.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, ops)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
      .finalize("operation graph");
  return gr;
}

// Engine index, notes and knobs of one configuration; false when it needs a filter or bias
// reorder (int8x32 engines: our tensors are never reordered).
bool read_engine(Candidate& c) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  must(cudnnBackendGetAttribute(c.cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
       "engine of a configuration");
  must(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &c.engine),
       "engine global index");
  std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  must(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                static_cast<int64_t>(notes.size()), &n, notes.data()),
       "engine numerical notes");
  notes.resize(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(n, notes.size()))));
  c.notes = note_bits(notes);
  std::vector<cudnnBackendBehaviorNote_t> behavior(CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
  n = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               static_cast<int64_t>(behavior.size()), &n, behavior.data()) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < std::min<int64_t>(n, behavior.size()); ++i)
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER ||
          behavior[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER)
        return false;
  // Knobs: informational only (the summary and debug lines); a failure to read them is ignored.
  std::vector<Desc> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(choices.back().get());
  }
  n = 0;
  if (cudnnBackendGetAttribute(c.cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               static_cast<int64_t>(raw.size()), &n, raw.data()) != CUDNN_STATUS_SUCCESS)
    n = 0;
  std::ostringstream os;
  for (int64_t i = 0; i < std::min<int64_t>(n, raw.size()); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, got = 0;
    if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &type) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got, &value) !=
            CUDNN_STATUS_SUCCESS)
      continue;
    const char* name = knob_name(static_cast<int>(type));
    os << (os.tellp() > 0 ? " " : "");
    if (name) os << name;
    else os << "k" << static_cast<int>(type);
    os << "=" << value;
  }
  c.knobs = os.str().empty() ? "none" : os.str();
  return true;
}

// The configurations of heuristics `mode`, in its order (none when this mode refuses the graph).
std::vector<Desc> heuristic_configs(const Graph& gr, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, gr.graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
      .finalize("engine heuristics");
  int64_t count = 0;
  must(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                nullptr),
       "engine heuristics count");
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    must(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                  raw.data()),
         "engine heuristics results");
  cfgs.resize(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(got, count))));
  return cfgs;
}


}  // namespace conv_backend
}  // namespace cuda
}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA && SPIKEMESH_HAVE_CUDNN
