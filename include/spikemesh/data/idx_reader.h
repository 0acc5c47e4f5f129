// idx_reader.h — reader of (gzipped) IDX files, the format of MNIST and Fashion-MNIST.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sm {

struct IdxArray {
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;   // unsigned-byte payload, row-major
};

// Reads an IDX file of unsigned bytes (type 0x08), gzip-compressed or not. Throws
// sm::Error(Input) naming the file on a missing file, bad magic or truncation.
IdxArray read_idx_u8(const std::string& path);

}  // namespace sm
