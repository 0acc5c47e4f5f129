// idx_reader.cpp — IDX parsing through zlib's gz* interface (reads plain files too).
#include "spikemesh/data/idx_reader.h"

#include <zlib.h>

#include "spikemesh/core/error.h"

namespace sm {

IdxArray read_idx_u8(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) SM_INPUT_ERROR(path << ": cannot open (is dataset-fashion-mnist installed? try 'make deps')");
  struct Closer { gzFile f; ~Closer() { gzclose(f); } } closer{f};
  unsigned char magic[4];
  if (gzread(f, magic, 4) != 4) SM_INPUT_ERROR(path << ": truncated IDX header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08)
    SM_INPUT_ERROR(path << ": not an unsigned-byte IDX file (magic " << int(magic[2]) << "/" << int(magic[3]) << ")");
  // Bounded before anything is allocated: a damaged header must not ask for exabytes.
  constexpr int kMaxDims = 8;
  constexpr int64_t kMaxBytes = int64_t(1) << 34;  // 16 GiB: far above any IDX dataset
  if (magic[3] < 1 || magic[3] > kMaxDims)
    SM_INPUT_ERROR(path << ": IDX header declares " << int(magic[3]) << " dimensions (1 to " << kMaxDims << " expected)");
  IdxArray a;
  int64_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    if (gzread(f, b, 4) != 4) SM_INPUT_ERROR(path << ": truncated IDX header");
    int64_t v = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | b[3];
    a.dims.push_back(v);
    if (v > 0 && total > kMaxBytes / v)
      SM_INPUT_ERROR(path << ": IDX header declares more than " << (kMaxBytes >> 30) << " GiB of data (damaged file?)");
    total *= v;
  }
  a.data.resize(total);
  int64_t got = 0;
  while (got < total) {
    int chunk = static_cast<int>(std::min<int64_t>(total - got, 1 << 30));
    int r = gzread(f, a.data.data() + got, chunk);
    if (r <= 0) SM_INPUT_ERROR(path << ": truncated IDX payload (" << got << " of " << total << " bytes)");
    got += r;
  }
  return a;
}

}  // namespace sm
