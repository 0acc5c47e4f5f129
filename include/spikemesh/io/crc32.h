// crc32.h — zlib crc32 of byte ranges of any length and the crc of a concatenation from its
// parts' crcs (crc32_combine): checkpoints' and imported datasets' crc32 attributes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sm {

// crc32 (zlib) of n bytes continuing from `crc` (start: 0); any n (zlib's length is 32-bit).
uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc = 0);
// crc of A||B from crc(A), crc(B) and len(B) bytes.
uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, int64_t len_b);

}  // namespace sm
