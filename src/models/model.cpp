// model.cpp — Model: finalisation, forward/backward over the unit list, parameter and
// statistics collection, and the human-readable summary table.
#include "spikemesh/models/model.h"

#include "spikemesh/models/stage.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace sm {

namespace {

int64_t logical_param_count(Layer& l) {
  int64_t n = 0;
  for (Param* p : l.params()) n += shape_numel(p->shape);
  return n;
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return v < 0 ? "-" + s : s;
}

struct SummaryRow {
  std::string unit, path, type, shape, params;
};

// Appends one row per leaf layer (and one per residual add) below `l`; returns l's output.
Shape summarize(Layer& l, const std::string& parent_path, bool finalized, const Shape& in,
                std::vector<SummaryRow>& rows) {
  // Before finalize a layer's name is local; after, it is the full path (name_layers).
  std::string path = finalized ? l.name() : join_layer_path(parent_path, l.name());
  std::vector<Layer*> kids = l.children();
  if (kids.empty()) {
    Shape out = l.output_shape(in);
    rows.push_back({"", path.empty() ? "-" : path, l.type(), shape_str(out), with_commas(logical_param_count(l))});
    return out;
  }
  Shape s = in;
  for (Layer* c : kids) s = summarize(*c, path, finalized, s, rows);
  if (l.type() == "residual") {
    s = l.output_shape(in);
    rows.push_back({"", path.empty() ? "-" : path, "residual add", shape_str(s), "0"});
  }
  return s;
}

}  // namespace

void Model::finalize(DType dt, Device dev, uint64_t seed) {
  SM_CHECK(!finalized_, "model '" << info.name << "' finalised twice");
  SM_CHECK(dt == DType::F32 || dt == DType::F64, "model parameters are f32 or f64, got " << dtype_name(dt));
  for (auto& u : units) u->finalize(dt, dev, seed);
  if (dev.is_cuda() && loss) loss = with_cuda_support(std::move(loss));  // the loss runs where the outputs are
  dtype_ = dt;
  device_ = dev;
  finalized_ = true;
}

DType Model::dtype() const {
  SM_CHECK(finalized_, "model '" << info.name << "' has no dtype before finalize()");
  return dtype_;
}

Tensor Model::forward(const Tensor& x, Ctx& ctx) {
  return Stage(*this, 0, units.size()).forward(x, ctx);  // [T, N, ...input_shape] -> [T, N, num_classes]
}

Tensor Model::backward(const Tensor& dy, Ctx& ctx) {
  Stage all(*this, 0, units.size());
  Tensor dx = all.backward_input(dy, ctx);  // [T, N, ...input_shape]
  if (ctx.split_wgrad) all.backward_weight(ctx);
  return dx;
}

void Model::reset_state() { Stage(*this, 0, units.size()).reset_state(); }

void Model::zero_grad() { Stage(*this, 0, units.size()).zero_grad(); }

std::vector<Param*> Model::params() { return Stage(*this, 0, units.size()).params(); }

std::vector<Buffer*> Model::buffers() { return Stage(*this, 0, units.size()).buffers(); }

std::vector<LayerStat> Model::stats() { return Stage(*this, 0, units.size()).stats(); }

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (auto& u : units) n += logical_param_count(*u);
  return n;
}

std::vector<Shape> Model::unit_output_shapes() const {
  std::vector<Shape> out;
  Shape s = info.input_shape;
  for (auto& u : units) {
    s = u->output_shape(s);
    out.push_back(s);
  }
  return out;
}

std::string Model::summary() {
  std::vector<SummaryRow> rows;
  Shape s = info.input_shape;
  for (size_t i = 0; i < units.size(); ++i) {
    size_t before = rows.size();
    s = summarize(*units[i], "", finalized_, s, rows);
    if (rows.size() > before) rows[before].unit = std::to_string(i);  // label the unit's first row
  }
  SummaryRow head{"unit", "layer", "type", "output [per sample]", "params"};
  size_t w[5] = {head.unit.size(), head.path.size(), head.type.size(), head.shape.size(), head.params.size()};
  for (auto& r : rows) {
    w[0] = std::max(w[0], r.unit.size());
    w[1] = std::max(w[1], r.path.size());
    w[2] = std::max(w[2], r.type.size());
    w[3] = std::max(w[3], r.shape.size());
    w[4] = std::max(w[4], r.params.size());
  }
  std::ostringstream os;
  os << "model " << info.name << " (" << info.source << "): input " << shape_str(info.input_shape) << " ("
     << info.input_kind << "), T " << info.T << ", " << info.num_classes << " classes, loss " << info.loss << ", "
     << units.size() << " units\n";
  auto line = [&](const SummaryRow& r) {
    os << std::right << std::setw(static_cast<int>(w[0])) << r.unit << "  " << std::left
       << std::setw(static_cast<int>(w[1])) << r.path << "  " << std::setw(static_cast<int>(w[2])) << r.type << "  "
       << std::setw(static_cast<int>(w[3])) << r.shape << "  " << std::right << std::setw(static_cast<int>(w[4]))
       << r.params << "\n";
  };
  line(head);
  for (auto& r : rows) line(r);
  os << "total parameters: " << with_commas(num_parameters()) << "\n";
  return os.str();
}

}  // namespace sm
