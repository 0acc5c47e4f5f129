// import_events.h — `spikemesh data cifar10-dvs | dvs128-gesture | n-mnist | n-caltech101`: a published
// neuromorphic dataset (event_datasets.h) integrated into frames (frame_integration.h) and
// written as one spikemesh dataset file (h5_dataset.h schema + the event attributes,
// docs/architecture.md §8c) by every rank of a group together.
// Collective over the group (nullptr: this process alone). The samples are imported in rounds
// in SpikingJelly's order; in a round each rank decodes a contiguous block of files, the ranks
// then agree on which samples succeeded (--skip-bad), assign rows and write them with one
// collective MPI-IO write per split. Invariants:
//  * the file is written as <out>.tmp and renamed to <out> only when complete (never a half file
//    under the final name; an existing <out> is replaced only with --overwrite, and only then);
//  * after every round the .tmp holds its progress (files done, rows, crc32s, counts) under a
//    fingerprint of the options and the listing: rerunning the same command (at any rank count)
//    resumes after the last finished round once the rows written are read back and match their
//    crc32; a .tmp that cannot be opened, verified, or was made with other options is removed
//    and the import starts over;
//  * before a round's writes every rank checks the room it needs (free space, ulimit -f), so a
//    full disk stops the import with one message, the .tmp kept for a resume;
//  * every error (a bad file without --skip-bad, bad options) is one Input error on every rank;
//  * SIGTERM / SIGUSR1 (core/stop_signal.h) stop it after the current round, agreed over the
//    ranks, the .tmp closed with its progress: a normal return (stopped), exit status 0.
#pragma once
#include <cstdint>
#include <string>

namespace sm {

class Comm;

struct EventImportOptions {
  std::string dataset;    // "cifar10-dvs" | "dvs128-gesture" | "n-mnist" | "n-caltech101"
  std::string from, out;
  int T = 10;
  std::string split_by = "number";  // number | time (ignored with duration_us)
  int64_t duration_us = 0;          // > 0: SpikingJelly's fixed-duration frames, the first T kept
  int size = 0;                     // 0: the sensor's H x W; else frames resized to size x size
  double train_ratio = 0.9;         // CIFAR10-DVS and N-Caltech101 only
  bool include_background = false;  // N-Caltech101: keep BACKGROUND_Google as a class
  std::string dtype;                // u8 | u16 | f16 | f32; "": u8, or f32 when resized
  bool events = false;              // also keep the raw events
  bool skip_bad = false, overwrite = false;
  int deflate = -1;                 // 0: uncompressed; 1..9 deflate level; -1: 1 for u8/u16, 0 for f16/f32
  int64_t files_per_round = 32;     // per rank
  bool progress = true;
};

struct EventImportResult {
  int64_t train = 0, test = 0, skipped = 0, saturated = 0, files = 0;
  double seconds = 0;
  bool resumed = false;
  bool stopped = false;  // SIGTERM / SIGUSR1 ended it after a round: rerun to resume
};

EventImportResult import_event_dataset(const EventImportOptions& o, Comm* group);

}  // namespace sm
