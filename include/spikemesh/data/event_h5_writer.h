// event_h5_writer.h — the collective HDF5 writer of imported event datasets (docs/architecture.md
// §8c): one file written by every rank of a group through MPI-IO, each rank writing the rows it
// imported; /train|test/x [N, T, 2, H, W] (u8/u16/f16/f32, chunked by sample, optionally
// deflated), y (i64 [N]), n_frames (i32 [N], fixed-duration frames only) and, when kept, the raw
// events /split/events/{t,x,y,p,offsets} (1-d, growing).
// Every member function is COLLECTIVE OVER THE GROUP given at create/open (all ranks call it in
// the same order, a rank with nothing to write included); alone (group nullptr) it is serial.
// Invariants: datasets are created at their largest size (every listed sample) and shrunk by
// finish() to the rows written (--skip-bad); only x may be deflated (the raw events never are,
// so a round never rewrites an earlier round's bytes); writes use collective transfers
// (required for filtered datasets in parallel HDF5); attributes are written with the same value
// on every rank.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/io/h5file.h"

namespace sm {

class Comm;

enum class StoredType { U8, U16, F16, F32 };
const char* stored_type_name(StoredType t);
StoredType stored_type_from_name(const std::string& s);  // Input error names --dtype
size_t stored_type_size(StoredType t);
// Frames (f32, n values) to the stored type's bytes in `out`: u8/u16 rounded to nearest even,
// f16 as IEEE half; values above the type's range saturate. Returns how many saturated.
int64_t frames_to_stored(const float* v, int64_t n, StoredType t, std::vector<uint8_t>& out);

// The rows of one split that this rank writes in one call, ascending, and their contents in
// the same order.
struct EventRows {
  std::vector<int64_t> rows;
  std::vector<uint8_t> x;          // rows.size() * row bytes, stored type
  std::vector<int64_t> y;
  std::vector<int32_t> n_frames;   // fixed-duration frames only
  // Raw events (kept only with --events): each row's first event index in the split's event
  // arrays, and the events of every row concatenated in row order.
  std::vector<int64_t> ev_first, ev_count;
  std::vector<int64_t> ev_t;
  std::vector<uint16_t> ev_x, ev_y;
  std::vector<uint8_t> ev_p;
};

struct EventFileShape {
  int T = 10, height = 128, width = 128;  // frames [T, 2, height, width]
  StoredType stored = StoredType::U8;
  int64_t train_rows = 0, test_rows = 0;  // the largest sizes (every listed sample)
  bool events = false, n_frames = false;
  int deflate = 0;                        // 0: uncompressed, 1..9: deflate level
};

class EventH5Writer {
 public:
  EventH5Writer() = default;
  // Creates (truncating) `path` with every dataset.
  static EventH5Writer create(const std::string& path, Comm* group, const EventFileShape& shape);
  // Opens an existing `path` read-write to continue an interrupted import (Input error if it
  // cannot be opened or lacks a dataset).
  static EventH5Writer open(const std::string& path, Comm* group, const EventFileShape& shape);

  // Writes this rank's rows of split `s`; `events_total` is the split's event count after this
  // call on all ranks together (the events arrays grow to it).
  void write(Split s, const EventRows& mine, int64_t events_total);
  // Root attributes (same values on every rank).
  H5File& file() { return file_; }
  // Shrinks every dataset to the rows (and events) written, writes the final event offsets
  // entries, flushes.
  void finish(int64_t train_rows, int64_t test_rows, int64_t train_events, int64_t test_events);
  void flush();
  void close();
  int64_t row_bytes() const;

 private:
  H5File file_;
  Comm* group_ = nullptr;
  EventFileShape shape_;
};

}  // namespace sm
