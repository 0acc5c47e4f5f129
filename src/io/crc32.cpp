// crc32.cpp — see crc32.h.
#include "spikemesh/io/crc32.h"

#include <zlib.h>

#include <algorithm>

namespace sm {

uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc) {
  uLong c = crc;
  const Bytef* p = static_cast<const Bytef*>(data);
  while (n) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, int64_t len_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(len_b)));
}

}  // namespace sm
