// dataset_bench.cpp — the two reader passes of dataset_bench.h, timed per rank; the slowest
// rank's rate is reported (a data-parallel step waits for it).
#include "spikemesh/data/dataset_bench.h"

#include <algorithm>
#include <cstdio>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/data/event_frames_reader.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/prefetcher.h"
#include "spikemesh/data/sampler.h"

namespace sm {

DatasetBenchResult bench_dataset_reader(const DatasetBenchOptions& o, Comm* group) {
  const int rank = group ? group->rank() : 0, nranks = group ? group->size() : 1;
  if (o.split != "train" && o.split != "test") SM_INPUT_ERROR("--split " << o.split << ": expected train or test");
  if (o.batch < 1) SM_INPUT_ERROR("--batch-size " << o.batch << ": must be >= 1");
  if (o.prefetch < 1) SM_INPUT_ERROR("--prefetch " << o.prefetch << ": must be >= 1");
  const Split split = o.split == "train" ? Split::Train : Split::Test;
  const FramesOption frames = parse_frames_option(o.frames);
  H5Dataset ds = H5Dataset::open(o.file, group, true, frames.on ? &frames : nullptr);  // collective
  const int64_t n = ds.size(split), global = o.batch * nranks;
  if (n < global)
    SM_INPUT_ERROR(o.file << ": /" << o.split << " has " << n << " samples, fewer than one global batch of " << global
                          << " (" << nranks << " rank(s) x --batch-size " << o.batch << ")");
  EpochSampler sampler(n, global, o.seed, true);
  const int64_t batches = o.batches > 0 ? o.batches : std::min<int64_t>(sampler.batches_per_epoch(), 200);
  const DatasetInfo& info = ds.info();
  DatasetBenchResult r;
  r.samples = batches * o.batch;
  r.sample_mb = static_cast<double>(shape_numel(info.sample_shape)) * 4.0 / 1048576.0;
  if (rank == 0)
    SM_INFO("reading " << o.file << " /" << o.split << ": " << batches << " shuffled batches of " << o.batch << " per rank ("
                       << nranks << " rank(s)), samples " << shape_str(info.sample_shape) << " stored "
                       << info.stored_name
                       << (frames.on ? ", frames made on the fly from its events (--frames " + frames.text + ")" : ""));

  auto slowest = [&](double mine) {
    std::vector<double> v = {-mine};
    if (group) all_reduce_doubles(*group, v, ReduceOp::Max);
    return -v[0];
  };
  // (1) the trainer's reader: a prefetch thread, independent (sec2) reads of this rank's slice.
  {
    if (group) group->barrier();
    Timer t;
    Prefetcher<int64_t> pf(
        [&](int64_t k) {
          Tensor x, y;
          ds.read(split, sampler.batch_indices(0, k, rank, nranks), x, y);
          return x.dim(0);
        },
        batches, o.prefetch);
    int64_t got = 0;
    while (auto b = pf.next()) got += *b;
    r.prefetch_samples_s = slowest(static_cast<double>(got) / (t.ms() / 1000.0));
  }
  // (2) the evaluator's reader: one collective MPI-IO read per batch.
  {
    if (group) group->barrier();
    Timer t;
    int64_t got = 0;
    for (int64_t k = 0; k < batches; ++k) {
      Tensor x, y;
      ds.read_collective(split, sampler.batch_indices(1, k, rank, nranks), x, y);
      got += x.dim(0);
    }
    r.collective_samples_s = slowest(static_cast<double>(got) / (t.ms() / 1000.0));
  }
  if (rank == 0) {
    std::printf("prefetch thread, independent reads (train): %10.1f samples/s per rank  (%.1f MB/s of f32 batches)\n",
                r.prefetch_samples_s, r.prefetch_samples_s * r.sample_mb);
    std::printf("collective MPI-IO reads (eval):             %10.1f samples/s per rank  (%.1f MB/s)\n",
                r.collective_samples_s, r.collective_samples_s * r.sample_mb);
    if (o.step_ms > 0) {
      const double need = static_cast<double>(o.batch) / (o.step_ms / 1000.0);
      std::printf("a training step of %.0f ms at batch %lld per rank consumes %.1f samples/s: the prefetch reader "
                  "delivers %.1fx that\n",
                  o.step_ms, static_cast<long long>(o.batch), need, r.prefetch_samples_s / need);
    }
    std::fflush(stdout);
  }
  return r;
}

}  // namespace sm
