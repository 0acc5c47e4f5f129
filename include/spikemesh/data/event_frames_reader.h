// event_frames_reader.h — frames made on the fly from a dataset file's stored raw events
// (`train --frames T,SPLIT`, docs/datasets.md "Frames made on the fly"): a file imported with
// `--events` keeps each sample's events in /split/events/{t,x,y,p,offsets}; this reader
// integrates the events of the samples asked for into [T, 2, H, W] frames with the importer's
// own integration (frame_integration.h integrate_frames) and resize (resize_bilinear_aa when the
// file was imported with --size), so that for the import's settings the frames are bitwise the
// frames training reads from the stored /x.
// Invariants:
//  * the frames pass through the file's stored type exactly as the importer stores them
//    (frames_to_stored: u8/u16 rounded and saturated at 255/65535, f16 rounded, f32 exact) and
//    are multiplied by the file's x_scale, as H5Dataset::read delivers /x;
//  * the offsets of both splits are read and validated (monotonic, within the event arrays)
//    when the reader is made; every event read is checked to lie on the sensor before it is
//    integrated (a damaged file is an Input error naming it, never a write out of bounds);
//  * read_events makes HDF5 calls only (the caller runs it inside hdf5_call, a Local task: no
//    MPI call, no other rank waited for); frames() makes none and may run on any thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/data/event_formats.h"
#include "spikemesh/data/event_h5_writer.h"
#include "spikemesh/data/frame_integration.h"
#include "spikemesh/data/h5_dataset.h"

namespace sm {

// `--frames` parsed: off (read the stored /x), or T and the split (sensor size from the file).
struct FramesOption {
  bool on = false;
  FrameSpec spec;    // T, split_by, duration_us
  std::string text;  // as given, for messages
};

// "" or "off": off; "T,number" | "T,time" | "T,duration:US" (SpikingJelly 2.0's fixed-duration
// grid of US microseconds, the first T frames kept). One Input error naming `flag` otherwise.
FramesOption parse_frames_option(const std::string& text, const std::string& flag = "--frames");

// The events of some samples of one split: one stream, sample k = [begin[k], begin[k+1]).
struct SampleEvents {
  EventStream events;
  std::vector<int64_t> begin;
};

class EventFramesReader {
 public:
  // Reads the file's attributes (sensor_h, sensor_w, size, stored type, dataset) and both
  // splits' offsets through `f` (HDF5 calls: inside hdf5_call or before other threads use
  // HDF5). Input error naming the file when it holds no events (re-import with --events) or
  // its events are inconsistent.
  EventFramesReader(const H5File& f, const DatasetInfo& info, const FramesOption& opt);
  // Per sample: [T, 2, H, W].
  Shape sample_shape() const;
  // The events of samples `sorted` (ascending, unique) of split `s`, one H5Dread per array and
  // run of consecutive samples, checked to lie on the sensor. HDF5 calls only.
  SampleEvents read_events(const H5File& f, Split s, const std::vector<int64_t>& sorted) const;
  // x f32 [indices.size(), T, 2, S, S]: the frames of samples `indices` (any order, duplicates
  // allowed; each in `sorted`, whose events `ev` holds). Input error naming the file, split and
  // sample when SpikingJelly's integration fails on it (an empty time bin, no event for
  // fixed-duration frames). No HDF5 or MPI call; parallel over samples (OpenMP).
  void frames(const SampleEvents& ev, Split s, const std::vector<int64_t>& sorted, const std::vector<int64_t>& indices,
              Tensor& x) const;

 private:
  std::string path_, text_;
  FrameSpec spec_;  // with the file's sensor
  int out_h_ = 0, out_w_ = 0;  // the stored frames' H x W (the sensor's, or the import's --size)
  StoredType stored_;   // the file's element type
  float x_scale_ = 1.0f;
  bool t_u32_ = false;
  std::shared_ptr<const std::vector<int64_t>> offsets_[2];  // per split: rows + 1
};

}  // namespace sm
