// cmd_data.cpp — `spikemesh data`: make datasets. `fashion-mnist` imports Debian's
// dataset-fashion-mnist and `synth-dvs` writes a synthetic CIFAR10-DVS-shaped event dataset
// (rank 0 does the work); `cifar10-dvs`, `dvs128-gesture`, `n-mnist` and `n-caltech101` import the published
// neuromorphic datasets with every rank (data/import_events.h); `info` prints what a dataset
// file holds; `bench` times its readers (data/dataset_bench.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/data/dataset_bench.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/augment_preview.h"
#include "spikemesh/data/augment_spec.h"
#include "spikemesh/data/import_events.h"
#include "spikemesh/data/import_spike_trains.h"
#include "spikemesh/data/importers.h"
#include "spikemesh/core/flag_ranges.h"

namespace sm {

namespace {
struct DataOptions {
  std::string src = "/usr/share/datasets/fashion-mnist";
  std::string out;
  SynthDvsConfig synth;
  std::string info_file;
  bool info_verify = false;
  EventImportOptions events;
  SpikeImportOptions spikes;
  DatasetBenchOptions bench;
};

// The world as a Comm for the collective data commands; nullptr alone (no MPI call at all).
std::unique_ptr<Comm> world_or_alone(const AppEnv& env) {
  return env.size > 1 ? std::make_unique<Comm>(env.world, "world") : nullptr;
}

// What each published dataset's --from folder holds, for --help.
struct EventDatasetHelp {
  const char* name;
  const char* title;
  const char* layout;
  const char* example;
};
const EventDatasetHelp kEventDatasets[] = {
    {"cifar10-dvs", "import CIFAR10-DVS (10 class folders of .aedat) into HDF5 frames",
     "--from: the folder holding the 10 class folders airplane ... truck as unzipped from the published archives\n"
     "(jAER AEDAT 2.0 .aedat files; AEDAT 3.1 files are read too), or SpikingJelly's events_np/ of .npz (t, x, y, p).\n"
     "No official split: per class, files in SpikingJelly's order (names sorted as strings), the first\n"
     "ceil(n * --train-ratio) train and the rest test (spikingjelly split_to_train_test_set, random_split=False).",
     "  spikemesh data cifar10-dvs --from ~/CIFAR10DVS --out input/cifar10dvs_T10.h5\n"
     "  mpirun -np 8 spikemesh data cifar10-dvs --from /scratch/CIFAR10DVS --out /scratch/c10dvs_48.h5 --T 10 --size 48"},
    {"dvs128-gesture", "import DVS128 Gesture (AEDAT 3.1 recordings + label files) into HDF5 frames",
     "--from: the DvsGesture folder as unzipped: user*_*.aedat (AEDAT 3.1), user*_*_labels.csv and\n"
     "trials_to_train.txt / trials_to_test.txt (the split). One sample per labelled interval [start, end);\n"
     "labels are SpikingJelly's: class folders \"0\"..\"10\" sorted as strings (label 2 is csv class 11).",
     "  spikemesh data dvs128-gesture --from ~/DvsGesture --out input/gesture_T16.h5 --T 16"},
    {"n-mnist", "import N-MNIST (Train/ and Test/ folders of .bin) into HDF5 frames",
     "--from: the folder holding Train/ and Test/ (each with class folders 0..9 of 40-bit .bin event files).",
     "  spikemesh data n-mnist --from ~/NMNIST --out input/nmnist_T10.h5"},
    {"n-caltech101", "import N-Caltech101 (class folders of .bin) into HDF5 frames",
     "--from: the Caltech101 folder unzipped from Caltech101.zip (one folder per class of 40-bit ATIS .bin files,\n"
     "as N-MNIST's), the folder above it, or SpikingJelly's events_np/ of .npz. Sensor 180 x 240 (H x W, SpikingJelly's\n"
     "NCaltech101.get_H_W()): frames [T, 2, 180, 240], or [T, 2, S, S] with --size S; an event outside it is an error.\n"
     "Classes: the folders sorted as strings (upper case first), BACKGROUND_Google left out: 101 classes;\n"
     "--include-background keeps it, label 0, as SpikingJelly's NCaltech101 does (102 classes).\n"
     "No official split: per class, files in SpikingJelly's order (names sorted as strings), the first\n"
     "ceil(n * --train-ratio) train and the rest test (spikingjelly split_to_train_test_set, random_split=False).",
     "  spikemesh data n-caltech101 --from ~/N-Caltech101/Caltech101 --out input/ncaltech101_T10.h5\n"
     "  mpirun -np 8 spikemesh data n-caltech101 --from /scratch/N-Caltech101 --out /scratch/ncal_64.h5 --size 64\n"
     "  spikemesh data n-caltech101 --from ~/N-Caltech101 --out ncal_sj.h5 --include-background   # SpikingJelly's 102"},
};

// `data fashion-mnist`: Debian's Fashion-MNIST IDX files into HDF5 (rank 0).
void add_fashion_mnist_subcommand(CLI::App* cmd, const std::shared_ptr<DataOptions>& o, const AppEnv& env) {
  CLI::App* fm = cmd->add_subcommand("fashion-mnist", "import Fashion-MNIST (gzipped IDX) into HDF5");
  fm->footer(
      "Examples:\n"
      "  spikemesh data fashion-mnist   # Debian's dataset-fashion-mnist -> input/fashion_mnist.h5\n"
      "  spikemesh data fashion-mnist --src ~/fmnist --out /scratch/fmnist.h5   # your own copy of the IDX files");
  fm->add_option("--src", o->src, "directory of the IDX files")->capture_default_str();
  fm->add_option("--out", o->out, "output file (default: input/fashion_mnist.h5)");
  fm->callback([o, &env]() {
    if (env.rank != 0) return;
    import_fashion_mnist(o->src, o->out.empty() ? "input/fashion_mnist.h5" : o->out);
  });
}

// `data synth-dvs`: a synthetic CIFAR10-DVS-shaped event dataset (rank 0).
void add_synth_dvs_subcommand(CLI::App* cmd, const std::shared_ptr<DataOptions>& o, const AppEnv& env) {
  CLI::App* sd = cmd->add_subcommand("synth-dvs", "write a synthetic event dataset shaped like CIFAR10-DVS");
  sd->footer(
      "Examples:\n"
      "  spikemesh data synth-dvs --out input/synth_dvs.h5 --train 2000 --test 400\n"
      "  spikemesh data synth-dvs --out tiny_dvs.h5 --T 4 --size 16 --classes 4 --train 64 --test 32\n"
      "Samples are [T, 2, size, size] event frames (layout NTCHW), like CIFAR10-DVS.");
  sd->add_option("--out", o->out, "output file")->required();
  sd->add_option("--classes", o->synth.classes, "classes")->capture_default_str()
      ->check(range_validator("classes", true));
  sd->add_option("--T", o->synth.T, "time steps per sample")->capture_default_str()
      ->check(range_validator("T", true));
  sd->add_option("--size", o->synth.size, "frame height and width")->capture_default_str()
      ->check(range_validator("size", true));
  sd->add_option("--train", o->synth.train, "training samples")->capture_default_str()
      ->check(range_validator("train", true));
  sd->add_option("--test", o->synth.test, "test samples")->capture_default_str()
      ->check(range_validator("test", true));
  sd->add_option("--seed", o->synth.seed, "seed")->capture_default_str()
      ->check(range_validator("seed", true));
  sd->callback([o, &env]() {
    if (env.rank != 0) return;
    make_synth_dvs(o->synth, o->out);
  });
}

// `data <dataset>` for one published event dataset: every rank imports (import_event_dataset).
void add_event_import_subcommand(CLI::App* cmd, const std::shared_ptr<DataOptions>& o, const AppEnv& env,
                                 const EventDatasetHelp& d) {
  CLI::App* ev = cmd->add_subcommand(d.name, d.title);
  ev->footer(std::string("Examples:\n") + d.example +
             "\n\n" + d.layout +
             "\nFrames are SpikingJelly's integrate_events_by_fixed_frames_number (channel 0 = polarity 0): [T, 2, H, W]\n"
             "event counts. Every rank takes part (mpirun -np N): the files are split over the ranks and written into\n"
             "one file with parallel HDF5. The file appears under --out only when complete; an interrupted import\n"
             "resumes when the same command is run again (its progress is in <out>.tmp).");
  const std::string name = d.name;
  ev->add_option("--from", o->events.from, "the dataset's folder (see below)")->required();
  ev->add_option("--out", o->events.out, "output HDF5 file")->required();
  ev->add_option("--T", o->events.T, "frames per sample")->capture_default_str()->check(range_validator("T", true));
  ev->add_option("--split-by", o->events.split_by,
                 "number: each frame an equal share of the events (the last takes the rest); time: equal time bins")
      ->capture_default_str()
      ->check(CLI::IsMember({"number", "time"}));
  ev->add_option("--duration-us", o->events.duration_us,
                 "fixed-duration frames of this many microseconds instead (SpikingJelly 2.0's grid); the first T "
                 "are kept, zero-padded, and /split/n_frames holds each sample's count")
      ->check(range_validator("duration-us", true));
  ev->add_option("--size", o->events.size,
                 "resize frames to size x size (bilinear with antialias, as torchvision's Resize in SpikingJelly's "
                 "CIFAR10-DVS 48x48 recipe); default: the sensor's")
      ->check(range_validator("size", true));
  if (name == "cifar10-dvs" || name == "n-caltech101")
    ev->add_option("--train-ratio", o->events.train_ratio, "share of each class that trains")
        ->capture_default_str()
        ->check(range_validator("train-ratio", false));
  if (name == "n-caltech101")
    ev->add_flag("--include-background", o->events.include_background,
                 "keep the BACKGROUND_Google folder as a class (label 0), as SpikingJelly does");
  ev->add_option("--dtype", o->events.dtype,
                 "stored type: u8 | u16 | f16 | f32 (default u8; f32 with --size); values above its range saturate "
                 "and are counted")
      ->check(CLI::IsMember({"u8", "u16", "f16", "f32"}));
  ev->add_flag("--events", o->events.events, "also keep the raw events of each sample (/split/events/{t,x,y,p,offsets})");
  ev->add_flag("--skip-bad", o->events.skip_bad,
               "skip unreadable files and samples that cannot be integrated, counting them, instead of stopping");
  ev->add_flag("--overwrite", o->events.overwrite, "replace --out if it exists (once the new file is complete)");
  ev->add_option("--deflate", o->events.deflate,
                 "deflate level of the frames, 0 = uncompressed; default -1: 1 for u8/u16 counts (mostly zeros), "
                 "0 for f16/f32 (resized frames hardly compress and read 14x slower deflated)")
      ->capture_default_str()
      ->check(range_validator("deflate", true));
  ev->add_option("--files-per-round", o->events.files_per_round,
                 "files each rank imports between two collective writes (and resume points)")
      ->capture_default_str()
      ->check(range_validator("files-per-round", true));
  ev->callback([o, &env, name]() {
    o->events.dataset = name;
    import_event_dataset(o->events, world_or_alone(env).get());
  });
}

// `data shd | ssc`: the audio spike datasets binned into [T, 1, 1, 700] counts (rank 0).
void add_spike_import_subcommand(CLI::App* cmd, const std::shared_ptr<DataOptions>& o, const AppEnv& env,
                                 const std::string& name) {
  const bool ssc = name == "ssc";
  CLI::App* sp = cmd->add_subcommand(name, ssc ? "import Spiking Speech Commands (35 classes) from its HDF5 files"
                                                : "import Spiking Heidelberg Digits (20 classes) from its HDF5 files");
  sp->footer(std::string("Examples:\n  spikemesh data ") + name + " --from ~/" + name + " --out input/" + name +
             ".h5 --T 100 --dt-ms 10\n  spikemesh data " + name + " --from ~/" + name + " --out input/" + name +
             "_T20.h5 --T 20 --split-by number\n\n--from holds the published " + name + "_train.h5" +
             (ssc ? ", ssc_valid.h5" : "") + " and " + name +
             "_test.h5 (gunzipped): /spikes/times (s), /spikes/units (0..699), /labels.\n"
             "Each recording becomes [T, 1, 1, 700] spike counts, binned as SpikingJelly 2.0's loader does "
             "(docs/datasets.md)." +
             (ssc ? "\nThe validation split is written to /valid/x, /valid/y (training reads /train and /test)." : ""));
  sp->add_option("--from", o->spikes.from, "the folder of the published files")->required();
  sp->add_option("--out", o->spikes.out, "output HDF5 file")->required();
  sp->add_option("--T", o->spikes.T, "time bins per recording")->capture_default_str()->check(range_validator("T", true));
  sp->add_option("--split-by", o->spikes.split_by,
                 "number: each bin an equal share of the spikes (the last takes the rest); time: T equal windows "
                 "of the recording's span")
      ->capture_default_str()
      ->check(CLI::IsMember({"number", "time"}));
  sp->add_option("--dt-ms", o->spikes.dt_ms,
                 "fixed bins of this many milliseconds from the first spike instead (SpikingJelly's duration); the "
                 "first T are kept, zero-padded")
      ->check(range_validator("dt-ms", false));
  sp->add_option("--dtype", o->spikes.dtype, "stored type: u8 (counts above 255 saturate, counted) | f32")
      ->capture_default_str()
      ->check(CLI::IsMember({"u8", "f32"}));
  sp->add_option("--deflate", o->spikes.deflate,
                 "deflate level of the counts, 0 = uncompressed; default -1: 1 for u8 (mostly zeros), 0 for f32")
      ->capture_default_str()
      ->check(range_validator("deflate", true));
  sp->add_flag("--overwrite", o->spikes.overwrite, "replace --out if it exists (once the new file is complete)");
  sp->callback([o, &env, name]() {
    if (env.rank != 0) return;
    o->spikes.dataset = name;
    import_spike_dataset(o->spikes);
  });
}

// `data bench`: times a dataset file's readers as training and evaluation read it.
void add_data_bench_subcommand(CLI::App* cmd, const std::shared_ptr<DataOptions>& o, const AppEnv& env) {
  CLI::App* bn = cmd->add_subcommand("bench", "time the readers of a dataset file (samples/s per rank)");
  bn->footer(
      "Examples:\n"
      "  spikemesh data bench input/cifar10dvs.h5 --batch-size 16\n"
      "  mpirun -np 4 spikemesh data bench /scratch/c10dvs_48.h5 --step-ms 900   # vs a 900 ms training step\n"
      "  spikemesh data bench input/c10dvs_events.h5 --frames 16,number   # frames made from the stored events\n"
      "Reads shuffled batches as training does (a prefetch thread, each rank its slice) and as evaluation does\n"
      "(one collective MPI-IO read per batch); prints the slowest rank's samples/s. With --frames (as train's)\n"
      "the events of a file imported with --events are read and integrated instead of /x.");
  bn->add_option("file", o->bench.file, "dataset file")->required();
  bn->add_option("--split", o->bench.split, "train or test")->capture_default_str()->check(CLI::IsMember({"train", "test"}));
  bn->add_option("--batch-size", o->bench.batch, "samples per rank per batch")->capture_default_str()
      ->check(range_validator("batch-size", true));
  bn->add_option("--batches", o->bench.batches, "batches to read (default: one epoch, at most 200)")
      ->check(range_validator("batches", true));
  bn->add_option("--prefetch", o->bench.prefetch, "batches read ahead")->capture_default_str()
      ->check(range_validator("prefetch", true));
  bn->add_option("--step-ms", o->bench.step_ms, "a training step's time, to compare with")
      ->check(range_validator("step-ms", false));
  bn->add_option("--frames", o->bench.frames,
                 "as train's --frames: T,number | T,time | T,duration:US frames made on the fly from the stored events");
  bn->callback([o, &env]() { bench_dataset_reader(o->bench, world_or_alone(env).get()); });
}

// `data info`: a dataset file's schema, sizes and attributes; --verify rechecks the crc32s.
void add_data_info_subcommand(CLI::App* cmd, const std::shared_ptr<DataOptions>& o, const AppEnv& env) {
  CLI::App* in = cmd->add_subcommand("info", "print a dataset file's schema and sizes");
  in->footer(
      "Examples:\n"
      "  spikemesh data info input/fashion_mnist.h5\n"
      "  spikemesh data info input/synth_dvs.h5\n"
      "  spikemesh data info input/cifar10dvs_48.h5 --verify   # recompute the crc32s an importer recorded");
  in->add_option("file", o->info_file, "dataset file")->required();
  in->add_flag("--verify", o->info_verify, "also recompute the crc32 of every split's x and y (imported event datasets)");
  in->callback([o, &env]() {
    H5Dataset d = H5Dataset::open(o->info_file);
    if (env.rank != 0) return;
    const DatasetInfo& i = d.info();
    std::printf("%s\n  layout %s, sample %s, stored %s (x_scale %g)\n  classes %d, T %d, encoding %s\n"
                "  train %lld, test %lld\n  source: %s\n",
                i.path.c_str(), i.layout.c_str(), shape_str(i.sample_shape).c_str(), i.stored_name.c_str(), i.x_scale,
                i.num_classes, i.T, i.encoding.c_str(), static_cast<long long>(i.train_size),
                static_cast<long long>(i.test_size), i.source.c_str());
    const char* shown[] = {"num_classes", "T", "layout", "encoding", "source", "x_scale"};
    for (const auto& kv : dataset_attributes(o->info_file)) {
      if (std::find(std::begin(shown), std::end(shown), kv.first) != std::end(shown)) continue;
      std::string v = kv.second;
      if (v.size() > 600) v = v.substr(0, 600) + " ...";
      std::printf("  %s: %s\n", kv.first.c_str(), v.c_str());
    }
    if (o->info_verify) {
      bool ok = true;
      for (const std::string& line : verify_dataset_crc32(o->info_file, ok)) std::printf("  %s\n", line.c_str());
      std::fflush(stdout);
      if (!ok) SM_INPUT_ERROR(o->info_file << ": the data do not match their crc32 (see above)");
    }
  });
}

// `data augment`: what --augment makes of some training samples (rank 0 writes the file).
void add_data_augment_subcommand(CLI::App* cmd, const AppEnv& env) {
  auto o = std::make_shared<AugmentPreviewOptions>();
  CLI::App* au = cmd->add_subcommand("augment", "write what --augment makes of some training samples (a preview)");
  au->footer(std::string("Examples:\n"
                         "  spikemesh data augment --data input/synth_dvs.h5 --augment hflip,roll:0.5:5,cutmix:0.5:1 "
                         "--out aug.h5\n"
                         "  spikemesh data augment --data input/shd.h5 --augment timeshift:1:3,dropevent:1:0.2 --epoch 3 "
                         "--first 100 --count 8 --out aug.h5\n"
                         "The samples are exactly those training draws in that epoch with that seed, under any layout.\n"
                         "The file holds /x_original, /x, /partner, /target and every drawn parameter (/ops).\n"
                         "Steps (NAME[:P[:M]]):\n") +
             augment_ops_help());
  au->add_option("--data", o->data, "dataset file")->required();
  au->add_option("--augment", o->augment, "the steps, as train --augment takes them")->required();
  au->add_option("--out", o->out, "output HDF5 file")->required();
  au->add_option("--seed", o->seed, "the run's --seed (train's default)")->capture_default_str()
      ->check(range_validator("seed", true));
  au->add_option("--frames", o->frames, "the run's --frames (T,number | T,time | T,duration:US): frames made from "
                                        "the stored events");
  au->add_option("--epoch", o->epoch, "the epoch whose draws to show")->capture_default_str()
      ->check(range_validator("epoch", true));
  au->add_option("--first", o->first, "first training sample")->capture_default_str()
      ->check(range_validator("first", true));
  au->add_option("--count", o->count, "samples to show")->capture_default_str()->check(range_validator("count", true));
  au->add_flag("--overwrite", o->overwrite, "replace --out if it exists");
  au->callback([o, &env]() {
    if (env.rank == 0) write_augment_preview(*o);
  });
}
}  // namespace

void add_data_command(CLI::App& app, const AppEnv& env) {
  auto o = std::make_shared<DataOptions>();
  CLI::App* cmd = app.add_subcommand("data", "make or inspect HDF5 datasets");
  cmd->require_subcommand(1);
  cmd->footer(
      "Examples:\n"
      "  spikemesh data fashion-mnist                   # -> input/fashion_mnist.h5\n"
      "  spikemesh data synth-dvs --out input/synth_dvs.h5 --train 2000 --test 400\n"
      "  spikemesh data info input/fashion_mnist.h5\n"
      "Datasets are HDF5: /train/x, /train/y, /test/x, /test/y and root attributes (docs/architecture.md §8).\n"
      "Each subcommand has its own --help.");

  add_fashion_mnist_subcommand(cmd, o, env);
  add_synth_dvs_subcommand(cmd, o, env);
  for (const EventDatasetHelp& d : kEventDatasets) add_event_import_subcommand(cmd, o, env, d);
  for (const char* name : {"shd", "ssc"}) add_spike_import_subcommand(cmd, o, env, name);
  add_data_bench_subcommand(cmd, o, env);
  add_data_info_subcommand(cmd, o, env);
  add_data_augment_subcommand(cmd, env);
}

}  // namespace sm
