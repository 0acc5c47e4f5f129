// run_dir.h — a run's output directory and its plain-text log (output/README.md).
// RunLog writes to stdout and to <run>/log.txt on the root rank only; other ranks hold an
// inactive log, so callers write lines unconditionally.
#pragma once
#include <fstream>
#include <string>

namespace sm {

class Comm;

class RunLog {
 public:
  // Appends to `path` when active (Input error naming it when it cannot be written).
  RunLog(const std::string& path, bool active);
  // One line to the log; to stdout too unless to_stdout is false.
  void line(const std::string& s, bool to_stdout = true);

 private:
  std::ofstream f_;
};

// mkdir -p `path` and check it is writable (Input errors naming `flag` and the path).
void make_dirs(const std::string& path, const std::string& flag);
// Collective over `group` (nullptr: nothing to check). Every rank must see the directory `dir`
// that rank 0 made (collective checkpoint writes need one shared file system): rank 0 writes
// a probe file holding a fresh token, every rank reads it back; a rank that cannot (a
// node-local path, a relative --output in another working directory) is an Input error on
// every rank naming `flag`, the directory and the rank. The probe is removed.
void check_shared_directory(Comm* group, const std::string& dir, const std::string& flag);
// "<model>-YYYYmmdd-HHMMSS" (local time).
std::string default_run_name(const std::string& model_name);
// "1h02m", "3m04s", "12s".
std::string format_duration(double seconds);

}  // namespace sm
