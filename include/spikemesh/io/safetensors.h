// safetensors.h — the safetensors file format (Hugging Face), read and written natively: an
// 8-byte little-endian header length N, N bytes of a JSON object (padded with spaces) mapping
// each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets into the
// data section that follows the header) plus an optional "__metadata__" map of strings, then
// the data section: every tensor's row-major little-endian bytes.
// Invariants of a file this reader accepts (those of the reference implementation): the header
// length fits the file and is at most 100 MB; the header is a JSON object; every entry has a
// dtype this program stores (F64, F32, F16, BF16, I64, I32, U8), non-negative dimensions and
// exactly dtype size × elements bytes; the entries, ordered by offset, tile the data section
// from its first byte to its last (no overlap, no gap, nothing past its end); names are unique
// and non-empty. Anything else is one Input error naming the file and the problem. The writer
// produces such files (tensors in the given order, header padded to a multiple of 8), written
// to <path>.tmp and renamed, so a failed write never leaves a half-written file.
// Local (no MPI). Host byte order must be little-endian (checked at compile time).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // ordered by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length: where the data section begins in the file
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Validates a whole file image (`size` bytes) as above. `origin` names it in errors.
SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& origin);

// Reads `path` (every tensor, in offset order) and, when `metadata` is given, its metadata.
NamedTensors read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// Writes `tensors` (host tensors of a dtype above, names unique and non-empty) and `metadata`.
// Input error naming the file when it cannot be written (nothing is left under its name then).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata);

// The safetensors dtype code of `dt` ("F32", ...); Input error for a dtype it cannot hold.
const char* safetensors_dtype_code(DType dt);

}  // namespace sm
