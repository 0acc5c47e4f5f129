// import_state.h — the progress record of an event import (data/import_events.h): what
// <out>.tmp holds after every finished round (import_state attribute), and the resume that
// trusts it only when the rows it records read back with their crc32s.
// Invariant: crc32s are zlib's over the stored bytes in row order, combined without reading
// back (crc32_combine), so they equal the crc32 of the whole dataset written so far.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/data/event_h5_writer.h"

namespace sm {

class Comm;
class H5File;
struct EventDatasetLayout;
struct FrameSpec;

struct ImportState {
  std::string fingerprint;   // the options and the listing (not the rank count nor the rounds)
  int64_t next_unit = 0;     // the files before it are done (rounds may differ between runs)
  int64_t rounds_done = 0;
  int64_t rows[2] = {0, 0}, events[2] = {0, 0};   // [train, test]
  uint32_t crc_x[2] = {0, 0}, crc_y[2] = {0, 0};  // zlib crc32 of the rows written, in row order
  int64_t skipped = 0, saturated = 0;
  int64_t empty[2] = {0, 0};  // samples without a single event (imported as zero frames), [train, test]
  std::vector<int64_t> per_class[2];
  std::vector<std::string> skipped_files;  // the first 100 messages
  std::vector<std::string> empty_samples;  // the first 100 sample names without an event

  std::string to_text() const;
  // false: not a record this version wrote.
  static bool parse(const std::string& text, ImportState& s);
};

// The index of a split in ImportState's [train, test] pairs.
inline int split_index(Split s) { return s == Split::Train ? 0 : 1; }

// Collective over `group` (nullptr: alone). When `tmp` exists (seen by any rank): opens it and
// resumes — returns true with `w` open on it and `st` its record — if its import_state carries
// `fingerprint` and every recorded row reads back with its crc32 (each rank a block); otherwise
// removes it (one warning saying why) and returns false with `w` empty.
bool resume_import(const std::string& tmp, const std::string& fingerprint, const EventFileShape& shape, Comm* group,
                   EventH5Writer& w, ImportState& st);

// The root attributes of a finished import (docs/architecture.md §8c; output/README.md) and
// the crc32 attribute of every split's x and y. Collective over the file's group: the same
// values on every rank.
void write_dataset_attributes(const H5File& f, const EventDatasetLayout& L, const std::string& source,
                              const FrameSpec& spec, int frame_h, int frame_w, StoredType stored, int deflate,
                              bool events,
                              const ImportState& st);

}  // namespace sm
