// eval_report.cpp — eval.h5 and the table of `spikemesh eval` (eval_report.h).
#include "spikemesh/train/eval_report.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/io/h5file.h"

namespace sm {

namespace {
double class_accuracy(const EvalOutcome& o, size_t c) {
  if (o.class_count[c] == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(o.class_correct[c]) / static_cast<double>(o.class_count[c]);
}

template <class T>
Tensor vector_tensor(const std::vector<T>& v, DType dt) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dt);
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

void write_attrs(const H5File& f, const EvalReport& r) {
  const EvalOutcome& o = r.result;
  for (auto [k, v] : {std::pair<const char*, const std::string*>{"checkpoint", &r.checkpoint}, {"data", &r.data},
                      {"split", &r.split}, {"model", &r.model}, {"precision", &r.precision}, {"layout", &r.layout}})
    f.set_attr(k, *v);
  for (auto [k, v] : {std::pair<const char*, int64_t>{"step", r.step}, {"epoch", r.epoch}, {"T", r.T},
                      {"batch_size", r.batch}, {"world_size", r.world_size},
                      {"num_classes", static_cast<int64_t>(o.class_count.size())}, {"correct", o.correct},
                      {"count", o.count}, {"format_version", 1}})
    f.set_attr(k, v);
  f.set_attr("loss", o.loss);
  f.set_attr("accuracy", o.accuracy);
  f.set_attr("format", "spikemesh-eval");
}
}  // namespace

void write_eval_h5(const EvalReport& r, const std::string& path) {
  const EvalOutcome& o = r.result;
  const std::string tmp = path + ".tmp";
  try {
    H5File f = H5File::create(tmp);
    write_attrs(f, r);
    {
      H5Group c = f.require_group("/class");
      c.write("correct", vector_tensor(o.class_correct, DType::I64));
      c.write("count", vector_tensor(o.class_count, DType::I64));
      std::vector<double> acc;
      for (size_t k = 0; k < o.class_count.size(); ++k) acc.push_back(class_accuracy(o, k));
      c.write("accuracy", vector_tensor(acc, DType::F64));
    }  // the group closes before the file
    f.write("firing_rate", vector_tensor(o.firing_rate, DType::F64));
    f.set_attr_on("firing_rate", "layer_names", join(o.layer_names));
    if (!o.labels.empty()) {  // eval --save-outputs
      const int64_t n = static_cast<int64_t>(o.labels.size());
      Tensor rows = vector_tensor(o.outputs, DType::F64);
      f.write("outputs", rows.view({n, static_cast<int64_t>(o.outputs.size()) / n}));
      f.write("labels", vector_tensor(o.labels, DType::I64));
    }
    f.flush();
    f.close();
  } catch (const Error& e) {
    std::remove(tmp.c_str());
    SM_INPUT_ERROR(path << ": cannot write the evaluation (" << e.what() << ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    SM_INPUT_ERROR(path << ": cannot write the evaluation (rename from " << tmp << " failed)");
  }
}

std::string eval_table(const EvalReport& r) {
  const EvalOutcome& o = r.result;
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof line, "%s split of %s, %lld samples: loss %.6f, accuracy %.2f%% (%lld/%lld)\n",
                r.split.c_str(), r.data.c_str(), static_cast<long long>(o.count), o.loss, 100.0 * o.accuracy,
                static_cast<long long>(o.correct), static_cast<long long>(o.count));
  os << "checkpoint " << r.checkpoint << " (model " << r.model << ", step " << r.step << ", T " << r.T << ", "
     << r.precision << "), layout " << r.layout << "\n" << line;
  os << "  class    samples  correct  accuracy\n";
  for (size_t k = 0; k < o.class_count.size(); ++k) {
    const double a = class_accuracy(o, k);
    char pct[32] = "-";
    if (!std::isnan(a)) std::snprintf(pct, sizeof pct, "%.2f%%", 100.0 * a);
    std::snprintf(line, sizeof line, "  %5zu  %9lld  %7lld  %8s\n", k, static_cast<long long>(o.class_count[k]),
                  static_cast<long long>(o.class_correct[k]), pct);
    os << line;
  }
  os << "  firing rate per neuron layer\n";
  for (size_t i = 0; i < o.firing_rate.size(); ++i) {
    std::snprintf(line, sizeof line, "  %-40s %.6f\n", i < o.layer_names.size() ? o.layer_names[i].c_str() : "?",
                  o.firing_rate[i]);
    os << line;
  }
  return os.str();
}

}  // namespace sm
