// test_spike_trains.cpp — the binning of SHD/SSC recordings (data/spike_trains.h) on hand-worked
// examples, and the float -> half rounding its float16 arithmetic rests on (core/float_bits.h)
// against the compiler's own IEEE binary16 conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "spikemesh/core/float_bits.h"
#include "spikemesh/data/spike_trains.h"

namespace sm {
namespace {

TEST(SpikeTrains, HalfRoundingEqualsTheCompilersBinary16Conversion) {
  int64_t checked = 0;
  auto same = [&](float f) {
    const float want = static_cast<float>(static_cast<_Float16>(f));
    const float got = round_float_to_half(f);
    ++checked;
    if (std::isnan(want)) return std::isnan(got);
    return float_to_bits(want) == float_to_bits(got);
  };
  // every float whose low 9 bits are 0 or 0x1ff, or hit the 13 dropped bits' tie patterns
  for (uint32_t hi = 0; hi < (1u << 23); ++hi)
    for (uint32_t lo : {0x000u, 0x1ffu, 0x100u}) {
      const uint32_t bits = (hi << 9) | lo;
      const float f = bits_to_float(bits);
      ASSERT_TRUE(same(f)) << std::hex << bits;
    }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.98e-8f, 5.96e-8f, 6.1e-5f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    EXPECT_TRUE(same(f)) << f;
  EXPECT_GT(checked, 25'000'000);
}

SpikeTrain train(std::vector<double> t, std::vector<int32_t> x) { return SpikeTrain{std::move(t), std::move(x)}; }

std::vector<float> bins(const SpikeTrain& s, int T, const char* split_by, double dt_ms, int bits = 64) {
  SpikeBinning b;
  b.T = T;
  b.split_by = split_by;
  b.dt_ms = dt_ms;
  b.channels = 3;
  b.time_bits = bits;
  std::vector<float> out(static_cast<size_t>(T) * 3, 0.0f);
  bin_spike_train(s, b, out.data());
  return out;
}

TEST(SpikeTrains, BinsByNumberTimeAndDurationAsWorkedOutByHand) {
  // 7 spikes at 0, 0.1, ..., 0.6 s on channels 0 1 2 0 1 2 0
  const SpikeTrain s = train({0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {0, 1, 2, 0, 1, 2, 0});
  // number, T 3: 2 + 2 + 3 spikes
  EXPECT_EQ(bins(s, 3, "number", 0), (std::vector<float>{1, 1, 0, 1, 0, 1, 1, 1, 1}));
  // time, T 2: windows [0, 0.3) and [0.3, 0.6] (the last runs to the end)
  EXPECT_EQ(bins(s, 2, "time", 0), (std::vector<float>{1, 1, 1, 2, 1, 1}));
  // 250 ms bins: [0, 250) holds 0, 0.1, 0.2; [250, 500) 0.3, 0.4; the last (3rd) 0.5, 0.6; T 4 pads
  EXPECT_EQ(bins(s, 4, "number", 250), (std::vector<float>{1, 1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0}));
  // no spikes: nothing, whatever the mode
  for (const char* m : {"number", "time"}) EXPECT_EQ(bins(train({}, {}), 2, m, 0), std::vector<float>(6, 0.0f));
  EXPECT_EQ(bins(train({}, {}), 2, "number", 10), std::vector<float>(6, 0.0f));
}

TEST(SpikeTrains, Float16TimesUseHalfArithmetic) {
  // spikes at 0, 1 + 2^-10 and 1.5 s (halves); 1000 t in half precision: 0, 1001 (1000.9766
  // rounded to the halves' 0.5 spacing) and 1500, so with 1001 ms bins the second spike is in
  // bin 1, where float64 arithmetic (1000.9766 // 1001 = 0) puts it in bin 0
  const SpikeTrain s = train({0.0, 1.0009765625, 1.5}, {0, 1, 2});
  EXPECT_EQ(bins(s, 2, "number", 1001, 16), (std::vector<float>{1, 0, 0, 0, 1, 1}));
  EXPECT_EQ(bins(s, 2, "number", 1001, 64), (std::vector<float>{1, 1, 0, 0, 0, 1}));
}

}  // namespace
}  // namespace sm
