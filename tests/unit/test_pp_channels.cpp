// test_pp_channels.cpp — the pipeline's one-way channels (parallel/pipeline/pp_channels.h) without MPI:
// the channels a placement uses, in their global order, and the per-channel order check.
// Every built-in schedule (gpipe, 1f1b, interleaved, zero_bubble; 2 to 4 ranks, v 1 to 3)
// passes; hand-written schedules that reorder one channel's messages fail with a message
// naming the channel and the first mismatching message. Transport names parse both ways.
#include <gtest/gtest.h>

#include <string>

#include "spikemesh/core/error.h"

#include "spikemesh/parallel/pipeline/pp_channels.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"
#include "spikemesh/parallel/pipeline/pp_transfer.h"

namespace {

using sm::PpChannel;
using sm::PpSchedule;

std::string channels_text(const PpSchedule& s) {
  std::string t;
  for (const PpChannel& c : sm::pp_channels(s)) t += (c.forward ? "F" : "B") + std::to_string(c.sender) + std::to_string(c.receiver) + " ";
  return t;
}

TEST(PpChannels, GlobalOrderForwardThenBackwardBySenderAndReceiver) {
  EXPECT_EQ(channels_text(sm::one_f_one_b(1, 2)), "");
  EXPECT_EQ(channels_text(sm::one_f_one_b(2, 2)), "F01 B10 ");
  EXPECT_EQ(channels_text(sm::one_f_one_b(3, 3)), "F01 F12 B10 B21 ");
  // interleaved: the last rank also feeds rank 0 (stage P-1 -> P)
  EXPECT_EQ(channels_text(sm::interleaved(2, 2, 2)), "F01 F10 B01 B10 ");
  EXPECT_EQ(channels_text(sm::interleaved(3, 2, 3)), "F01 F12 F20 B02 B10 B21 ");
  EXPECT_EQ((PpChannel{0, 1, true}.str()), "rank 0 -> rank 1 (activations)");
  EXPECT_EQ((PpChannel{1, 0, false}.str()), "rank 1 -> rank 0 (gradients)");
}

TEST(PpChannels, EveryBuiltInScheduleKeepsEachChannelInOrder) {
  for (int p = 2; p <= 4; ++p)
    for (int m : {p, 2 * p, 3 * p}) {
      for (const char* kind : {"gpipe", "1f1b"}) {
        const PpSchedule s = sm::make_schedule(kind, p, 1, m);
        ASSERT_TRUE(sm::validate_schedule(s).ok());
        EXPECT_EQ(sm::check_channel_order(s), "") << kind << " p" << p << " m" << m;
      }
      for (int v = 2; v <= 3; ++v)
        for (const char* kind : {"interleaved", "zero_bubble"}) {
          if (m < p * v) continue;
          const PpSchedule s = sm::make_schedule(kind, p, v, m);
          ASSERT_TRUE(sm::validate_schedule(s).ok()) << kind;
          EXPECT_EQ(sm::check_channel_order(s), "") << kind << " p" << p << " v" << v << " m" << m;
        }
    }
}

// Valid with MPI tags (the simulator accepts it), but rank 1 posts microbatch 1's receive
// first: on a FIFO channel it would get microbatch 0's bits.
TEST(PpChannels, ReorderedReceivesAreNamed) {
  const PpSchedule s = sm::parse_schedule(
      "0F0 0SF0 0F1 0SF1 0RB0 0BW0 0RB1 0BW1\n"
      "1RF1 1RF0 1F0 1F1 1BW0 1SB0 1BW1 1SB1\n",
      1, "reordered.pp");
  ASSERT_TRUE(sm::validate_schedule(s).ok()) << sm::validate_schedule(s).message();
  EXPECT_EQ(sm::check_channel_order(s),
            "channel rank 0 -> rank 1 (activations): message 1 is sent as 0SF0 (stage 0 -> 1, microbatch 0) but "
            "received as 1RF1 (stage 0 -> 1, microbatch 1)");
}

TEST(PpChannels, ReorderedGradientsAreNamed) {
  const PpSchedule s = sm::parse_schedule(
      "0F0 0SF0 0F1 0SF1 0RB1 0BW1 0RB0 0BW0\n"
      "1RF0 1F0 1RF1 1F1 1BW0 1SB0 1BW1 1SB1\n",
      1, "reordered.pp");
  ASSERT_TRUE(sm::validate_schedule(s).ok()) << sm::validate_schedule(s).message();
  EXPECT_EQ(sm::check_channel_order(s),
            "channel rank 1 -> rank 0 (gradients): message 1 is sent as 1SB0 (stage 1 -> 0, microbatch 0) but "
            "received as 0RB1 (stage 1 -> 0, microbatch 1)");
}

TEST(PpChannels, TransportNames) {
  for (sm::PpTransport t : {sm::PpTransport::Auto, sm::PpTransport::Staged, sm::PpTransport::Channels})
    EXPECT_EQ(sm::pp_transport_from_name(sm::pp_transport_name(t)), t);
  try {
    sm::pp_transport_from_name("nccl");
    ADD_FAILURE() << "accepted";
  } catch (const sm::Error& e) {
    EXPECT_EQ(std::string(e.what()), "pipeline transport 'nccl': use auto, staged or channels");
  }
}

}  // namespace
