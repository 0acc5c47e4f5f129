// calibration_file.h — the cache of the calibration (calibration.h: what is measured): the
// machine's costs under its fingerprint and the model profiles by their cache keys, in a small
// JSON file (docs/architecture.md §5b).
// File format (version 3): {"format": "spikemesh-calibration", "version": 3, "fingerprint": ...,
// "machine": {"links": [...], "optimizer_ns_per_element", "optimizer_scratch",
// "oversubscription", "capacity_mb"}, "models": {key: profile}}. Written by one rank (world rank
// 0) atomically: a temporary file renamed over the old one. Invariants: a file written and read
// back gives the same cache; a file of an older version reads as an empty cache with a note.
#pragma once
#include <map>
#include <string>

#include "spikemesh/planner/cost_model.h"

namespace sm {

struct CalibrationCache {
  std::string fingerprint;  // of the machine entry ("" when none)
  MachineCosts machine;
  std::map<std::string, ModelProfile> models;  // by ProfileRequest::cache_key()
  std::string note;  // why a file's contents were set aside (an older version), else ""
};

// $SPIKEMESH_CALIBRATION, else ${XDG_CACHE_HOME:-$HOME/.cache}/spikemesh/calibration.json.
std::string default_calibration_path();
// A missing file gives an empty cache, and so does a file of an older version (with a note);
// a file that is not a calibration file of this version or older is an Input error naming it.
CalibrationCache read_calibration(const std::string& path);
// The same in two parts (one rank reads, every rank parses what it broadcast): the file's text
// ("" when missing), and its parse ("" gives an empty cache); `path` names it in errors.
std::string read_calibration_text(const std::string& path);
CalibrationCache parse_calibration(const std::string& text, const std::string& path);
// Creates the directory if needed; Input error naming the file when it cannot be written.
void write_calibration(const std::string& path, const CalibrationCache& c);

}  // namespace sm
