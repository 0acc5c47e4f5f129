// byte_pack.h — append/read int64 and length-prefixed strings to/from a byte string, for
// broadcasting small structs (dataset info, checkpoint info) over MPI as MPI_BYTE.
// Invariant: readers consume fields in exactly the order writers appended them; same
// machine architecture on every rank (native byte order).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace sm {
namespace bytes {

inline void put(std::string& b, int64_t v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); }
inline void put(std::string& b, const std::string& s) {
  put(b, static_cast<int64_t>(s.size()));
  b += s;
}
inline int64_t get_i(const std::string& b, size_t& at) {
  int64_t v = 0;
  std::memcpy(&v, b.data() + at, sizeof v);
  at += sizeof v;
  return v;
}
inline std::string get_s(const std::string& b, size_t& at) {
  const size_t n = static_cast<size_t>(get_i(b, at));
  std::string s = b.substr(at, n);
  at += n;
  return s;
}

}  // namespace bytes
}  // namespace sm
