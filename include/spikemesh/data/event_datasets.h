// event_datasets.h — the published folder layouts of CIFAR10-DVS, DVS128 Gesture, N-MNIST and
// N-Caltech101, listed into samples in SpikingJelly's order (docs/architecture.md §8c): torchvision's
// DatasetFolder sorts class folders and file names as STRINGS (Gesture's folders "0".."10"
// give targets 0,1,10,2,...; CIFAR10-DVS files _0,_1,_10,_100,...), names compared as the
// frame files SpikingJelly writes: <stem>.npz, or <stem>_<frames>.npz with a fixed duration
// (`duration_names`: then they sort as <stem>_, so _1_ comes after _10_ and _100_).
// CIFAR10-DVS and N-Caltech101 have no official split: per class, in that order, the first
// ceil(n * train_ratio) files train and the rest test (SpikingJelly's split_to_train_test_set
// without random_split); train = class 0's, then class 1's, ... N-Caltech101's classes are its
// folders sorted as strings (upper case first), BACKGROUND_Google left out unless
// `include_background` (SpikingJelly keeps it: it lists every folder).
// Invariants: listing reads only folder names and the small text files (Gesture's
// trials_to_*.txt and *_labels.csv), never an event file; it is deterministic, so every rank
// lists the same samples; every Input error names the folder or file and what was expected.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "spikemesh/data/event_formats.h"
#include "spikemesh/data/h5_dataset.h"

namespace sm {

struct EventSampleRef {
  int32_t file = 0;   // index into EventDatasetLayout::files
  int64_t t_begin = std::numeric_limits<int64_t>::min();  // Gesture: the csv row's [start, end)
  int64_t t_end = std::numeric_limits<int64_t>::max();
  int32_t label = 0;
  Split split = Split::Train;
  std::string name;   // the sample's SpikingJelly file stem (Gesture: <trial>_<k>)
};

struct EventDatasetLayout {
  std::string dataset;  // "cifar10-dvs" | "dvs128-gesture" | "n-mnist" | "n-caltech101"
  std::string root;     // the folder the files are relative to
  int sensor_h = 0, sensor_w = 0;
  std::vector<std::string> class_names;  // label order
  std::vector<std::string> files;        // relative to root
  std::vector<EventFileFormat> formats;  // per file (.aedat: AEDAT 2.0 or 3.1, decided when read)
  // Every sample, train rows first, each split in SpikingJelly's order.
  std::vector<EventSampleRef> samples;
  int64_t train_size = 0, test_size = 0;
  double train_ratio = 0;  // CIFAR10-DVS and N-Caltech101 only
  // Does one file give several samples (Gesture)?
  bool multi_sample_files() const { return samples.size() != files.size(); }
  // Everything above as text (cross-rank comparison, the resume fingerprint).
  std::string describe() const;
};

EventDatasetLayout list_cifar10dvs(const std::string& dir, double train_ratio, bool duration_names = false);
EventDatasetLayout list_dvs128_gesture(const std::string& dir, bool duration_names = false);
EventDatasetLayout list_nmnist(const std::string& dir, bool duration_names = false);
// `dir`: the Caltech101 folder of class folders of .bin (or SpikingJelly's events_np of .npz),
// or a folder holding Caltech101/, events_np/ or extract/Caltech101/. Sensor 180 x 240 (H x W).
EventDatasetLayout list_ncaltech101(const std::string& dir, double train_ratio, bool include_background = false,
                                    bool duration_names = false);
// One of the above by dataset name (`include_background`: N-Caltech101 only).
EventDatasetLayout list_event_dataset(const std::string& dataset, const std::string& dir, double train_ratio,
                                      bool duration_names = false, bool include_background = false);

}  // namespace sm
