// evaluation.cpp — split evaluation through the layout (evaluation.h).
#include "spikemesh/train/evaluation.h"

#include <algorithm>

#include "spikemesh/comm/agree.h"
#include "spikemesh/data/sampler.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/train_step.h"
#include "batch_io.h"

namespace sm {

namespace {
// Adds `add` (empty: nothing) into `sum` element by element.
void add_counts(std::vector<int64_t>& sum, const std::vector<int64_t>& add) {
  for (size_t c = 0; c < add.size() && c < sum.size(); ++c) sum[c] += add[c];
}

// The per-class counts summed over the metrics group (collective over it; null: alone).
void reduce_class_counts(Comm* c, EvalOutcome& out) {
  if (!c) return;
  std::vector<double> v(out.class_correct.begin(), out.class_correct.end());
  v.insert(v.end(), out.class_count.begin(), out.class_count.end());
  all_reduce_doubles(*c, v, ReduceOp::Sum);  // exact: integers far below 2^53
  const size_t k = out.class_correct.size();
  for (size_t i = 0; i < k; ++i) {
    out.class_correct[i] = static_cast<int64_t>(v[i]);
    out.class_count[i] = static_cast<int64_t>(v[k + i]);
  }
}

// This rank's sums (loss·n, correct, n, firing·n ...) and class counts added over the metrics
// group; every rank ends with vectors of one length. Collective over the world.
void reduce_eval_sums(const LayoutGroups& groups, std::vector<double>& sums, EvalOutcome& out) {
  if (Comm* c = groups.metrics_comm()) {
    std::vector<double> len{static_cast<double>(sums.size())};
    all_reduce_doubles(*c, len, ReduceOp::Max);
    sums.resize(static_cast<size_t>(len[0]), 0.0);
    all_reduce_doubles(*c, sums, ReduceOp::Sum);
  }
  reduce_class_counts(groups.metrics_comm(), out);
}

// Per sample of the split (file order): the output's time mean, filled in by the rank that
// counted its batch. Exact over ranks: each element has one contributor, the rest add 0.
struct KeptOutputs {
  int64_t k = 0;
  std::vector<double> rows;  // [size, K]
  void keep(const std::vector<int64_t>& idx, const std::vector<double>& time_mean) {
    if (static_cast<int64_t>(time_mean.size()) != static_cast<int64_t>(idx.size()) * k) return;
    for (size_t i = 0; i < idx.size(); ++i) std::copy_n(time_mean.data() + i * k, k, rows.data() + idx[i] * k);
  }
  // Collective over the metrics group (null: alone). The labels are the dataset's own.
  void finish(Comm* metrics, const H5Dataset& ds, Split split, EvalOutcome& out) {
    if (metrics) all_reduce_doubles(*metrics, rows, ReduceOp::Sum);
    out.outputs = std::move(rows);
    out.labels = ds.labels(split);
  }
};
}  // namespace

EvalOutcome evaluate_split(Layout& layout, H5Dataset& ds, const EvalSettings& s) {
  layout.sync_buffers();
  const int rank = layout.groups().data_rank(), ranks = layout.groups().data_size();
  EpochSampler es(ds.size(s.split), s.batch * ranks, 0, false, false);
  Ctx ctx;
  ctx.seed = s.seed;
  ctx.training = false;
  EvalOutcome out;
  const size_t k = static_cast<size_t>(std::max(0, ds.info().num_classes));
  out.class_correct.assign(k, 0);
  out.class_count.assign(k, 0);
  Loss& loss = *layout.model().loss;
  const bool was_per_class = loss.per_class();
  loss.set_per_class(true);
  // Neurons report once they have run: after training that is now; a run that evaluates
  // before any forward in this process learns the names from its first batch.
  // Collective over pp (every rank calls it at the same points): the model's stats.
  std::vector<LayerStat> stats = layout.layer_stats();
  auto learn_names = [&] {
    if (!out.layer_names.empty()) return;
    for (const LayerStat& st : stats) out.layer_names.push_back(st.layer);
  };
  learn_names();
  std::vector<double> sums(3 + out.layer_names.size(), 0.0);  // loss·n, correct, n, firing·n ...
  KeptOutputs kept;
  if (s.keep_outputs) {
    kept.k = static_cast<int64_t>(layout.model().info.num_classes);
    kept.rows.assign(static_cast<size_t>(ds.size(s.split) * kept.k), 0.0);
  }
  for (int64_t b = 0; b < es.batches_per_epoch(); ++b) {
    const std::vector<int64_t> idx = es.batch_indices(0, b, rank, ranks);
    Tensor raw, y, x;
    if (s.independent_reads) {
      if (!idx.empty()) ds.read(s.split, idx, raw, y);
    } else {
      ds.read_collective(s.split, idx, raw, y);  // collective over the data group (possibly nothing)
    }
    if (!idx.empty()) {
      const Device dev = layout.model().device();
      MicroBatch h{encode(ds, raw, idx, s.T, s.encoding, s.dtype, s.seed, 0), y, 0, Tensor()};  // host
      MicroBatch d = to_device(dev.is_cuda() ? pinned_copy(h) : h, dev, s.activations);
      x = d.x;
      y = d.y;
    }
    const StepResult r = eval_step(layout, x, y, ctx);
    stats = layout.layer_stats();
    if (s.progress) s.progress(b + 1, es.batches_per_epoch());
    if (r.count == 0 || !layout.counts_in_metrics()) continue;  // tp peers: tp rank 0 counts; pp: the last stage
    learn_names();
    sums.resize(std::max(sums.size(), 3 + out.layer_names.size()), 0.0);
    sums[0] += r.loss * r.count;
    sums[1] += static_cast<double>(r.correct);
    sums[2] += static_cast<double>(r.count);
    for (size_t i = 0; i < stats.size() && 3 + i < sums.size(); ++i) sums[3 + i] += stats[i].value * r.count;
    add_counts(out.class_correct, r.class_correct);
    add_counts(out.class_count, r.class_count);
    if (s.keep_outputs) kept.keep(idx, r.time_mean);
  }
  loss.set_per_class(was_per_class);
  reduce_eval_sums(layout.groups(), sums, out);
  if (s.keep_outputs) kept.finish(layout.groups().metrics_comm(), ds, s.split, out);
  out.count = static_cast<int64_t>(sums[2]);
  out.correct = static_cast<int64_t>(sums[1]);
  const double n = static_cast<double>(std::max<int64_t>(1, out.count));
  out.loss = out.count ? sums[0] / n : 0.0;
  out.accuracy = out.count ? static_cast<double>(out.correct) / n : 0.0;
  for (size_t i = 3; i < sums.size(); ++i) out.firing_rate.push_back(sums[i] / n);
  return out;
}

}  // namespace sm
