// cmd_data.cpp — `spikemesh data`: make datasets. `fashion-mnist` imports Debian's
// dataset-fashion-mnist; `synth-dvs` writes a synthetic CIFAR10-DVS-shaped event dataset;
// `info` prints what a dataset file holds. Rank 0 does the work.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/importers.h"
#include "spikemesh/train/flag_ranges.h"

namespace sm {

namespace {
struct DataOptions {
  std::string src = "/usr/share/datasets/fashion-mnist";
  std::string out;
  SynthDvsConfig synth;
  std::string info_file;
};
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

  CLI::App* in = cmd->add_subcommand("info", "print a dataset file's schema and sizes");
  in->footer(
      "Examples:\n"
      "  spikemesh data info input/fashion_mnist.h5\n"
      "  spikemesh data info input/synth_dvs.h5");
  in->add_option("file", o->info_file, "dataset file")->required();
  in->callback([o, &env]() {
    H5Dataset d = H5Dataset::open(o->info_file);
    if (env.rank != 0) return;
    const DatasetInfo& i = d.info();
    std::printf("%s\n  layout %s, sample %s, stored %s (x_scale %g)\n  classes %d, T %d, encoding %s\n"
                "  train %lld, test %lld\n  source: %s\n",
                i.path.c_str(), i.layout.c_str(), shape_str(i.sample_shape).c_str(), dtype_name(i.stored), i.x_scale,
                i.num_classes, i.T, i.encoding.c_str(), static_cast<long long>(i.train_size),
                static_cast<long long>(i.test_size), i.source.c_str());
  });
}

}  // namespace sm
