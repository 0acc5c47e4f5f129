// h5_dataset.h — datasets in HDF5 (docs/architecture.md §8): /train/x, /train/y, /test/x, /test/y;
// root attributes num_classes, T, layout ("NTCHW" events or "NCHW" static), encoding,
// source, x_scale (multiplied into x on load; e.g. 1/255 for u8 images). x is u8, u16, f16 or f32,
// chunked by sample; y is an integer vector. open() validates the whole schema and every
// label up front so a bad file fails before any training with one message naming it.
// Labels are read once at open and kept in memory (8 bytes a sample).
//
// Distributed reads (docs/architecture.md §2, §8). open(path, group) is collective: EVERY rank
// validates the file it sees (a rank that cannot is named), then the ranks compare what they saw —
// the schema, the sample counts and a hash of every label — before any collective read: ranks that
// see different files (a stale node-local copy, a relative path in another working directory)
// get one Input error naming each rank's file and counts, instead of a hang in a collective
// read later. Every rank then holds TWO read-only handles on the file:
//  * an MPI-IO handle (H5Pset_fapl_mpio over the group, opened collectively) used by
//    read_collective(): one H5Dread with H5FD_MPIO_COLLECTIVE transfer in which every rank
//    selects its own rows (a union of hyperslabs; none for a rank with nothing to read — it
//    still takes part). It makes MPI calls, so it runs on the thread that owns this rank's
//    MPI traffic (the main thread), in the same order on every rank. Its collective open,
//    reads and close run under guarded_collective (comm/blocking_guard.h): an arrival check
//    and the --comm-timeout deadline, so they can never hang the job.
//  * a sec2 (POSIX) handle used by read(): independent, no MPI call at all. This is the
//    path for the Prefetcher's background thread. Why not collective (or even independent
//    MPI-IO) reads there: the process runs MPI_THREAD_SERIALIZED (MPI calls from the prefetch
//    thread would race the main thread's gradient all-reduces; MPI_THREAD_MULTIPLE is slow
//    or absent in many MPI builds), HDF5 is not thread-safe so every call goes through
//    hdf5_call (io/hdf5_thread.h: the HDF5 thread during a training run, else one mutex),
//    and a collective read queued there can wait behind another collective (a checkpoint
//    written in the background) that a rank entered in the other order. Reads on the sec2
//    handle never wait for another rank (Local tasks), so they may run anywhere. A read-only file
//    read by many processes with POSIX I/O is safe on every file system; a dp rank reads
//    only its own disjoint slice of each global batch, so the aggregate I/O is the same.
// Frames made on the fly (`--frames T,SPLIT`, data/event_frames_reader.h): a dataset opened with
// a FramesOption that is on reads each sample's stored raw events instead of /x and integrates
// them on the reading thread (the prefetch thread in training); info() then describes those
// frames (T, sample_shape [T, 2, H, W], frames), and both read() and read_collective() read
// independently on the sec2 handle (Local tasks; the integration outside the HDF5 thread).
#pragma once
#include <memory>
#include <string>
#include <vector>
#include <utility>

#include "spikemesh/core/tensor.h"
#include "spikemesh/io/h5file.h"

namespace sm {

class Comm;
class EventFramesReader;
struct FramesOption;
struct SampleEvents;

enum class Split { Train, Test };
const char* split_name(Split s);

struct DatasetInfo {
  std::string path;
  int num_classes = 0;
  int T = 0;               // time steps stored (NTCHW) or 0 for static images
  std::string layout;      // "NTCHW" | "NCHW"
  std::string encoding;    // how the file's x was made ("events", "image", ...)
  std::string source;
  double x_scale = 1.0;
  Shape sample_shape;      // per sample: [T, C, H, W] or [C, H, W]
  DType stored = DType::U8;  // the type x is read as (u16 and f16 files are read as f32)
  std::string stored_name;   // the file's element type: u8, u16, f16 or f32
  int64_t train_size = 0, test_size = 0;
  std::string frames;        // --frames when samples are made from the stored events, else ""
  bool resized = false;      // event frames resized at import (--size): interpolated, not counts
  bool is_events() const { return layout == "NTCHW"; }
};

class H5Dataset {
 public:
  // Opens and validates on this process alone (no communication). `fapl` defaults to sec2.
  static H5Dataset open(const std::string& path, hid_t fapl = H5P_DEFAULT);
  // Collective over `group` (see the header comment; nullptr: this process alone, the same as
  // open(path)): validation on rank 0, the outcome broadcast, then the sec2 handle and (when
  // `collective_handle`) the MPI-IO handle over group->mpi_comm() opened on every rank (HDF5
  // duplicates that communicator). Like the serial open it calls HDF5 directly: call it before
  // other threads call HDF5, or inside hdf5_call. Copies share the handles; destroying the last
  // copy closes the MPI-IO handle, which is collective too (every rank drops its last copy at
  // the same point of the program).
  // With `frames` on (non-null, parse_frames_option of event_frames_reader.h), every rank also
  // checks the file's stored events while validating (an Input error naming the file when it
  // has none) and read() makes frames from them.
  static H5Dataset open(const std::string& path, Comm* group, bool collective_handle = true,
                        const FramesOption* frames = nullptr);

  const DatasetInfo& info() const { return info_; }
  int64_t size(Split s) const { return s == Split::Train ? info_.train_size : info_.test_size; }
  // Every label of split `s`, in file order (read and validated at open).
  const std::vector<int64_t>& labels(Split s) const { return s == Split::Train ? *train_labels_ : *test_labels_; }
  // Samples `indices` (any order, duplicates allowed) of split `s`:
  // x f32 [n, ...sample_shape] scaled by x_scale, y i64 [n].
  // Independent: no MPI call, through hdf5_call (a Local task); safe on a prefetch thread.
  void read(Split s, const std::vector<int64_t>& indices, Tensor& x, Tensor& y) const;
  // The same result as read(), through one collective MPI-IO read. Collective over the
  // group given to open(): every rank calls it with the same split and its own
  // indices (possibly none). Through hdf5_call (a Collective task: it waits for a background
  // job, so callers wait for one first when --comm-timeout must not count that time). Must
  // not run on a prefetch thread. On a
  // dataset without an MPI-IO handle (serial open) it is read().
  void read_collective(Split s, const std::vector<int64_t>& indices, Tensor& x, Tensor& y) const;
  // read() retries a failed HDF5 read (a transient error of a shared file system: EIO, ESTALE,
  // ...) as core/io_retry.h says, reopening its handle before each retry; the last failure, or
  // a sample holding NaN/Inf, is an error as before. Every error about the samples read (and,
  // with --frames, their events) is this rank's alone (RankInput, naming the rank): the trainer
  // agrees on it; evaluation and `data bench` end the job instead of waiting. Collective reads are not retried (every
  // rank would have to retry together): they run outside training steps.
  bool has_collective_handle() const { return mpio_ && mpio_->file.file_id() >= 0; }

 private:
  // The MPI-IO handle and the group it is collective over; its destructor closes the file
  // collectively (guarded): the group must outlive every copy of the dataset.
  struct CollectiveHandle {
    H5File file;
    Comm* group = nullptr;
    ~CollectiveHandle();
  };
  mutable H5File file_;  // sec2 (or the caller's fapl): read(); reopened when a read is retried
  std::shared_ptr<CollectiveHandle> mpio_;  // MPI-IO over the open() communicator: read_collective()
  DatasetInfo info_;
  std::shared_ptr<const std::vector<int64_t>> train_labels_, test_labels_;
  std::shared_ptr<const EventFramesReader> frames_;  // --frames: samples made from the stored events
  // From now on samples are frames made from the stored events (`frames` on; info() updated).
  void make_frames_from_events(const FramesOption& frames);
  // The labels of samples `indices` of split `s`: i64 [n].
  Tensor labels_of(Split s, const std::vector<int64_t>& indices) const;
  void read_from(const H5File& f, bool collective, Split s, const std::vector<int64_t>& indices, Tensor& x,
                 Tensor& y) const;
  void read_retrying(const std::string& what, Split s, const std::vector<int64_t>& indices,
                     const std::vector<int64_t>& sorted, SampleEvents& events, Tensor& x, Tensor& y) const;
};

// Every root attribute of the dataset file `path` as (name, printable value), in name order
// (strings as they are, numbers, integer arrays comma-separated). Local; for `data info`.
std::vector<std::pair<std::string, std::string>> dataset_attributes(const std::string& path);

// zlib crc32 of the raw bytes (file element type) of rows [begin, end) of dataset `name` of `f`,
// read in pieces of at most 64 MiB. Local (independent reads).
uint32_t dataset_rows_crc32(const H5File& f, const std::string& name, int64_t begin, int64_t end);

// Recomputes the zlib crc32 of the raw bytes of every split's x and y that carries a `crc32`
// attribute (the event importers write them) and compares: one line per dataset ("/train/x:
// crc32 1a2b3c4d ok", or "... expected ..., the data give ..."); `all_ok` false on a mismatch.
// Reads the file once, in pieces of rows. Local; for `data info --verify`.
std::vector<std::string> verify_dataset_crc32(const std::string& path, bool& all_ok);

// Writes a dataset file split by split. Creates the file under a temporary name; commit()
// renames it into place, so an interrupted import never leaves a half-written dataset.
class H5DatasetWriter {
 public:
  H5DatasetWriter(const std::string& path, const DatasetInfo& info);
  ~H5DatasetWriter();
  // x: stored dtype (u8 or f32) [n, ...sample_shape]; y: i64 [n]. Creates the split's
  // datasets on first call (size = info train/test size) and appends at `offset`.
  void write(Split s, int64_t offset, const Tensor& x, const Tensor& y);
  // The same for an extra split `/group` of `total` samples (SSC's /valid), which training
  // does not read.
  void write_group(const std::string& group, int64_t total, int64_t offset, const Tensor& x, const Tensor& y);
  // The file being written, for extra root attributes before commit().
  H5File& file() { return file_; }
  // Deflate level (1..9; 0: none, the default) of the x datasets created from now on.
  void set_deflate(int level) { deflate_ = level; }
  void commit();

 private:
  std::string path_, tmp_;
  DatasetInfo info_;
  H5File file_;
  bool committed_ = false;
  int deflate_ = 0;
};

}  // namespace sm
