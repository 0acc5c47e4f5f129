// rng.cpp — Philox4x32-10 (Salmon et al., SC'11) and the derived uniform/normal draws.
#include "spikemesh/core/rng.h"

#include <cmath>

namespace sm {

namespace {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

Philox4 philox4x32(Philox4 c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c[0], hi0, lo0);
    mulhilo(kM1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

CounterRng::CounterRng(uint64_t seed, uint64_t stream) {
  // Mix seed and stream into the 64-bit key (splitmix64 finaliser on their combination).
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ stream;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  key_ = {static_cast<uint32_t>(z), static_cast<uint32_t>(z >> 32)};
}

Philox4 CounterRng::bits(uint64_t i, uint32_t a, uint32_t b) const {
  return philox4x32({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), a, b}, key_);
}

double CounterRng::uniform(uint64_t i, uint32_t a, uint32_t b) const {
  Philox4 r = bits(i, a, b);
  uint64_t x = (static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11);  // 53 bits
  return static_cast<double>(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

double CounterRng::normal(uint64_t i, uint32_t a, uint32_t b) const {
  Philox4 r = bits(i, a, b);
  uint64_t x1 = (static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11);
  uint64_t x2 = (static_cast<uint64_t>(r[2]) << 21) ^ (r[3] >> 11);
  double u1 = (static_cast<double>(x1 & ((1ull << 53) - 1)) + 1.0) * (1.0 / 9007199254740993.0);  // (0,1]
  double u2 = static_cast<double>(x2 & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace sm
