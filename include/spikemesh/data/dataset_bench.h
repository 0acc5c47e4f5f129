// dataset_bench.h — `spikemesh data bench FILE`: how fast each rank reads a dataset file the
// way training and evaluation do (docs/architecture.md §8): shuffled global batches, each rank
// its slice, (1) on a prefetch thread with independent reads (the trainer's reader), and (2)
// with one collective MPI-IO read per batch on the main thread (the evaluator's reader). With
// `frames` (train's --frames) the samples are frames made from the stored events on the reading
// thread (event_frames_reader.h), both passes reading independently.
// Collective over the group (nullptr: this process alone).
#pragma once
#include <cstdint>
#include <string>

namespace sm {

class Comm;

struct DatasetBenchOptions {
  std::string file;
  std::string split = "train";
  int64_t batch = 16;       // per rank
  int64_t batches = 0;      // 0: one epoch, at most 200 batches
  int prefetch = 2;         // batches read ahead
  uint64_t seed = 1;
  double step_ms = 0;       // > 0: also say how many such training steps the reader could feed
  std::string frames;       // as train's --frames: frames made on the fly from the stored events
};

struct DatasetBenchResult {
  double prefetch_samples_s = 0, collective_samples_s = 0;  // per rank, the slowest rank's
  double sample_mb = 0;                                      // f32 MB per sample delivered
  int64_t samples = 0;                                       // per rank per pass
};

DatasetBenchResult bench_dataset_reader(const DatasetBenchOptions& o, Comm* group);

}  // namespace sm
