// checkpoint_internal.h — private to src/io/checkpoint*.cpp: checksums, synced file writes,
// directory listing and pruning, and the /meta attributes shared by the single-rank and the
// sharded writer (so both write the same format).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"

namespace sm {
namespace ckpt {

// crc32 (zlib) of n bytes continuing from `crc` (start: 0).
uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc_of(const Tensor& t);  // of a CPU tensor's bytes
// crc of A||B from crc(A), crc(B) and len(B) bytes.
uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, int64_t len_b);

// Visits every dataset below `g` (recursively), with its path relative to g.
void for_each_dataset(const H5Group& g, const std::string& prefix,
                      const std::function<void(const H5Group&, const std::string&, const std::string&)>& f);

// Whole content of `path` written and fsynced with POSIX calls; failures are Input errors naming it.
void write_file_synced(const std::string& path, const char* data, size_t n);
void fsync_path(const std::string& path, bool directory);

// (step, path) of every ckpt_<9 digits>.h5 in dir, oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);
// Deletes the oldest complete checkpoints of `dir` so that `keep` remain counting `newest`
// (which is never deleted); damaged or incomplete files are left alone.
void prune_checkpoints(const std::string& dir, const std::string& newest, int keep);

// Every /meta attribute except "complete" (written last by the caller).
void write_meta(const H5Group& meta, const CheckpointMeta& m, int64_t num_optim_states);

// crc32 attribute of dataset `name` below g; -1 when absent.
int64_t stored_crc(const H5Group& g, const std::string& name);

}  // namespace ckpt
}  // namespace sm
