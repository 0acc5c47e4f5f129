// replica_check.cpp — replica checksums (zlib CRC-32) and their comparison over a comm.
#include "spikemesh/parallel/replica_check.h"

#include <zlib.h>

#include <algorithm>
#include <sstream>

#include "spikemesh/comm/comm.h"

namespace sm {

namespace {
uint32_t crc_bytes(uint32_t c, const void* data, size_t n) {
  const Bytef* p = static_cast<const Bytef*>(data);
  while (n) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = static_cast<uint32_t>(crc32(c, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return c;
}
}  // namespace

uint64_t tensor_checksum(const Tensor& t, uint64_t seed) {
  if (t.defined() && !t.device().is_cpu()) return tensor_checksum(t.to(Device::cpu()), seed);  // device: a host copy
  uint32_t a = static_cast<uint32_t>(seed), b = static_cast<uint32_t>(seed >> 32) ^ 0x9E3779B9u;
  if (t.defined() && t.numel() > 0) {
    a = crc_bytes(a, t.raw(), t.nbytes());
    // A second CRC over the bytes with a different start value makes collisions of the pair
    // as unlikely as a 64-bit hash for our purpose (detecting any drift, not adversaries).
    b = crc_bytes(b ^ static_cast<uint32_t>(t.nbytes()), t.raw(), t.nbytes());
  }
  return (static_cast<uint64_t>(b) << 32) | a;
}

uint64_t params_checksum(const std::vector<Param*>& params) {
  uint64_t h = 0;
  for (const Param* p : params) {
    h = tensor_checksum(p->value, h ^ text_hash(p->name));
  }
  return h;
}

void check_replicas_identical(Comm& comm, uint64_t checksum, const std::string& what) {
  Tensor mine = Tensor::empty({1}, DType::I64);
  mine.data<int64_t>()[0] = static_cast<int64_t>(checksum);
  Tensor all = Tensor::empty({comm.size()}, DType::I64);  // [p]
  comm.all_gather(mine, all);  // collective over comm
  const int64_t* v = all.data<int64_t>();
  bool same = true;
  for (int r = 1; r < comm.size(); ++r) same &= v[r] == v[0];
  if (same) return;
  std::ostringstream os;
  os << what << " differ across the " << comm.name() << " group (checksums:";
  for (int r = 0; r < comm.size(); ++r) os << " rank " << r << " " << std::hex << static_cast<uint64_t>(v[r]) << std::dec;
  os << ")";
  SM_CHECK(false, os.str());
}

}  // namespace sm
