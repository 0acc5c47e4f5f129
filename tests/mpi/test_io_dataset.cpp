// test_io_dataset.cpp — distributed dataset reads (data/h5_dataset.h) under MPI: each dp
// rank's collective MPI-IO read of its slice of every global batch (EpochSampler) equals the
// samples taken from the whole /train/x read independently (plain HDF5, whole dataset,
// indexed here); ranks with nothing to read still take part; duplicates and any order work;
// the independent (sec2) read on a Prefetcher thread gives the same bytes while the main
// thread runs collectives; a bad file gives the same Input error naming it on every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "mpi_test_env.h"
#include "mpi_test_files.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/prefetcher.h"
#include "spikemesh/data/sampler.h"

namespace sm {
namespace {

using test::world;
using test::world_rank;
using test::world_size;

Comm* group() { return test::world_group(); }  // the group the datasets are opened over
std::string shared_path(const std::string& tag) { return test::shared_name("sm_mpi_ds", tag) + ".h5"; }

// Rank 0 writes a dataset: u8 (NCHW, x_scale 1/255) or f32 events (NTCHW); random contents.
void write_dataset(const std::string& path, bool events, int64_t train, int64_t test, int classes = 5) {
  if (world_rank() == 0) {
    DatasetInfo in;
    in.num_classes = classes;
    in.layout = events ? "NTCHW" : "NCHW";
    in.T = events ? 3 : 0;
    in.encoding = events ? "events" : "image";
    in.source = "test";
    in.x_scale = events ? 1.0 : 1.0 / 255;
    in.sample_shape = events ? Shape{3, 2, 4, 5} : Shape{1, 6, 7};
    in.stored = events ? DType::F32 : DType::U8;
    in.train_size = train;
    in.test_size = test;
    H5DatasetWriter w(path, in);
    CounterRng rng(9, "dataset");
    for (Split s : {Split::Train, Split::Test}) {
      const int64_t n = s == Split::Train ? train : test;
      Shape xs = {n};
      xs.insert(xs.end(), in.sample_shape.begin(), in.sample_shape.end());
      Tensor x = Tensor::empty(xs, in.stored), y = Tensor::empty({n}, DType::I64);
      for (int64_t i = 0; i < x.numel(); ++i) {
        double u = rng.uniform(static_cast<uint64_t>(i), s == Split::Train ? 0 : 1);
        if (events) x.data<float>()[i] = static_cast<float>(u * 3);
        else x.data<uint8_t>()[i] = static_cast<uint8_t>(u * 256);
      }
      for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = (i * 7 + (s == Split::Train ? 1 : 2)) % classes;
      w.write(s, 0, x, y);
    }
    w.commit();
  }
  MPI_Barrier(world());
}

// Reference: the whole split read with plain HDF5 and indexed here (x * x_scale in f32).
struct Whole {
  Tensor x, y;
  int64_t row = 0;
  float scale = 1;
};
Whole read_whole(const std::string& path, Split s) {
  H5File f = H5File::open(path);
  Whole w;
  std::string g = std::string("/") + split_name(s);
  w.x = f.read(g + "/x", DType::F32);
  w.y = f.read(g + "/y", DType::I64);
  w.row = w.x.numel() / w.x.dim(0);
  w.scale = static_cast<float>(f.attr_double("x_scale"));
  return w;
}

::testing::AssertionResult matches(const Whole& w, const std::vector<int64_t>& idx, const Tensor& x, const Tensor& y) {
  if (x.dim(0) != static_cast<int64_t>(idx.size()) || y.numel() != static_cast<int64_t>(idx.size()))
    return ::testing::AssertionFailure() << "batch size " << x.dim(0) << " for " << idx.size() << " indices";
  for (size_t k = 0; k < idx.size(); ++k) {
    if (y.data<int64_t>()[k] != w.y.data<int64_t>()[idx[k]])
      return ::testing::AssertionFailure() << "label of sample " << idx[k];
    for (int64_t f = 0; f < w.row; ++f) {
      float want = w.x.data<float>()[idx[k] * w.row + f] * w.scale;
      if (x.data<float>()[k * w.row + f] != want)
        return ::testing::AssertionFailure() << "sample " << idx[k] << " element " << f;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(IoDataset, CollectiveReadsOfEachRanksBatchSliceEqualTheWholeFile) {
  for (bool events : {false, true}) {
    const std::string path = shared_path(events ? "events" : "images");
    write_dataset(path, events, 53, 11);
    H5Dataset ds = H5Dataset::open(path, group());
    EXPECT_TRUE(ds.has_collective_handle());
    EXPECT_EQ(ds.size(Split::Train), 53);
    EXPECT_EQ(ds.info().is_events(), events);
    const Whole whole = read_whole(path, Split::Train);
    const int64_t global_batch = 4 * 3;  // divisible by 1, 2, 3, 4, 6 ranks
    EpochSampler sampler(53, global_batch, 123, true);
    for (int64_t epoch = 0; epoch < 2; ++epoch)
      for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
        auto idx = sampler.batch_indices(epoch, b, world_rank(), world_size());
        Tensor x, y;
        ds.read_collective(Split::Train, idx, x, y);
        EXPECT_TRUE(matches(whole, idx, x, y)) << "epoch " << epoch << " batch " << b << " rank " << world_rank();
        Tensor xi, yi;
        ds.read(Split::Train, idx, xi, yi);  // the independent path: same bytes
        EXPECT_EQ(std::memcmp(x.raw(), xi.raw(), x.nbytes()), 0);
      }
    MPI_Barrier(world());
    if (world_rank() == 0) std::remove(path.c_str());
  }
}

TEST(IoDataset, RanksWithNothingToReadStillTakePart) {
  const std::string path = shared_path("uneven");
  write_dataset(path, false, 40, 9);
  H5Dataset ds = H5Dataset::open(path, group());
  const Whole test = read_whole(path, Split::Test);
  // Odd ranks read nothing; even ranks read unsorted indices with duplicates, from the test split.
  std::vector<int64_t> idx;
  if (world_rank() % 2 == 0) idx = {8, 2, 2, static_cast<int64_t>(world_rank()) % 9, 0, 8};
  for (int round = 0; round < 3; ++round) {
    Tensor x, y;
    ds.read_collective(Split::Test, idx, x, y);
    EXPECT_EQ(x.dim(0), static_cast<int64_t>(idx.size()));
    EXPECT_TRUE(matches(test, idx, x, y)) << "rank " << world_rank();
  }
  MPI_Barrier(world());
  if (world_rank() == 0) std::remove(path.c_str());
}

TEST(IoDataset, PrefetchThreadReadsWhileTheMainThreadRunsCollectives) {
  const std::string path = shared_path("prefetch");
  write_dataset(path, false, 64, 8);
  H5Dataset ds = H5Dataset::open(path, group());
  const Whole whole = read_whole(path, Split::Train);
  EpochSampler sampler(64, 8, 5, true);
  struct Batch {
    std::vector<int64_t> idx;
    Tensor x, y;
  };
  const int64_t n = sampler.batches_per_epoch();
  Prefetcher<Batch> pf(
      [&](int64_t k) {
        Batch b;
        b.idx = sampler.batch_indices(0, k, world_rank(), world_size());
        ds.read(Split::Train, b.idx, b.x, b.y);  // independent: no MPI on this thread
        return b;
      },
      n, 2);
  int64_t got = 0;
  while (auto b = pf.next()) {
    EXPECT_TRUE(matches(whole, b->idx, b->x, b->y)) << "batch " << got;
    // Main-thread MPI traffic and a collective read while the prefetcher reads ahead.
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, world());
    EXPECT_EQ(sum, world_size());
    Tensor x, y;
    std::vector<int64_t> mine = {static_cast<int64_t>(world_rank()) % 8};
    ds.read_collective(Split::Test, mine, x, y);
    ++got;
  }
  EXPECT_EQ(got, n);
  MPI_Barrier(world());
  if (world_rank() == 0) std::remove(path.c_str());
}

TEST(IoDataset, BadFileGivesTheSameInputErrorOnEveryRank) {
  const std::string path = shared_path("bad_labels");
  write_dataset(path, false, 10, 4, 3);
  if (world_rank() == 0) {  // a label out of range
    H5File f = H5File::open(path, true);
    Tensor y = f.read("/train/y", DType::I64);
    y.data<int64_t>()[6] = 17;
    H5Handle ds(H5Dopen2(f.id(), "/train/y", H5P_DEFAULT), H5Dclose);
    H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.raw());
  }
  MPI_Barrier(world());
  for (const std::string& p : {path, path + ".missing"}) {
    std::string msg;
    ErrorKind kind = ErrorKind::Internal;
    try {
      H5Dataset::open(p, group());
    } catch (const Error& e) {
      msg = e.what();
      kind = e.kind();
    }
    EXPECT_EQ(kind, ErrorKind::Input) << msg;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    if (p == path) {
      EXPECT_NE(msg.find("/train/y[6] = 17"), std::string::npos) << msg;
    }
    // Identical on every rank (rank 0's message).
    int len = static_cast<int>(msg.size()), lo = 0, hi = 0;
    MPI_Allreduce(&len, &lo, 1, MPI_INT, MPI_MIN, world());
    MPI_Allreduce(&len, &hi, 1, MPI_INT, MPI_MAX, world());
    EXPECT_EQ(lo, hi);
    std::string root = msg;
    root.resize(static_cast<size_t>(hi));
    MPI_Bcast(&root[0], hi, MPI_CHAR, 0, world());
    EXPECT_EQ(root, msg);
  }
  MPI_Barrier(world());
  if (world_rank() == 0) std::remove(path.c_str());
}

}  // namespace sm
