// test_pp_schedule.cpp — pipeline schedules as data (pp_schedule.h) and their simulator
// (pp_simulator.h) against closed forms: with F = B = W = 1 (BW = 2) gpipe and 1f1b have
// bubble (p−1)/(m+p−1); interleaved with v virtual stages, its per-logical-stage costs scaled
// by 1/v so that one rank's total work equals the non-interleaved case, has (p−1)/(v·m+p−1);
// ZB-H1 on the same placement reaches (p−1)/(3·v·m+p−1), about a third of interleaved's.
// Malformed schedules are rejected naming the offending action; the docs/semantics.md §6 rules
// raise input errors naming the flags.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "spikemesh/core/error.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"

namespace {

using sm::PpAction;
using sm::PpActionKind;
using sm::PpCosts;
using sm::PpSchedule;
using sm::PpSimulation;

// Costs F = B = W = 1/v per logical stage: a rank's v stages then cost what one stage costs
// in the non-interleaved pipeline.
PpSimulation run_scaled(const PpSchedule& s) {
  const double c = 1.0 / s.virtual_stages;
  return sm::simulate(s, PpCosts::uniform(s.logical_stages(), c, c, c));
}

// The message of the input error `fn` throws ("" if none).
template <class Fn>
std::string input_error_of(Fn fn) {
  try {
    fn();
  } catch (const sm::Error& e) {
    EXPECT_EQ(e.kind(), sm::ErrorKind::Input) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

std::string validation_errors(const std::string& text, int virtual_stages = 1) {
  const sm::PpValidation v = sm::validate_schedule(sm::parse_schedule(text, virtual_stages, "test"));
  EXPECT_FALSE(v.ok()) << text;
  return v.message();
}

TEST(PpSchedule, ActionTextForm) {
  EXPECT_EQ(sm::to_text(PpAction{PpActionKind::F, 0, 0}), "0F0");
  EXPECT_EQ(sm::to_text(PpAction{PpActionKind::BW, 1, 3}), "1BW3");
  EXPECT_EQ(sm::to_text(PpAction{PpActionKind::SEND_F, 0, 2}), "0SF2");
  EXPECT_EQ(sm::to_text(PpAction{PpActionKind::RECV_B, 12, 7}), "12RB7");
}

TEST(PpSchedule, OneFOneBWithTransfersIsExact) {
  EXPECT_EQ(sm::to_text(sm::one_f_one_b(2, 2)),
            "0F0 0SF0 0F1 0SF1 0RB0 0BW0 0RB1 0BW1\n"
            "1RF0 1F0 1BW0 1SB0 1RF1 1F1 1BW1 1SB1\n");
  // Stages on the same rank exchange nothing.
  EXPECT_EQ(sm::to_text(sm::interleaved(1, 2, 1)), "0F0 1F0 1BW0 0BW0\n");
}

TEST(PpSchedule, GpipeAndOneFOneBBubbleMatchesClosedForm) {
  const int cases[][2] = {{2, 4}, {4, 8}, {4, 4}, {3, 7}, {1, 3}};
  for (const auto& c : cases) {
    const int p = c[0], m = c[1];
    const double expected = double(p - 1) / (m + p - 1);
    for (const PpSchedule& s : {sm::gpipe(p, m), sm::one_f_one_b(p, m)}) {
      ASSERT_TRUE(sm::validate_schedule(s).ok()) << s.kind << "\n" << sm::validate_schedule(s).message();
      const PpSimulation sim = sm::simulate(s, PpCosts::uniform(p));
      std::printf("  %-6s p=%d m=%d bubble %.4f (closed form %.4f) makespan %.1f\n", s.kind.c_str(), p, m,
                  sim.bubble_fraction, expected, sim.makespan);
      EXPECT_NEAR(sim.bubble_fraction, expected, 1e-12) << s.kind << " p " << p << " m " << m;
      EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * (m + p - 1));
    }
  }
}

TEST(PpSchedule, InterleavedBubbleMatchesClosedForm) {
  const int cases[][3] = {{2, 2, 4}, {4, 2, 8}, {4, 2, 4}, {4, 3, 8}, {2, 3, 6}, {4, 4, 16}};
  for (const auto& c : cases) {
    const int p = c[0], v = c[1], m = c[2];
    const PpSchedule s = sm::interleaved(p, v, m);
    ASSERT_TRUE(sm::validate_schedule(s).ok()) << sm::validate_schedule(s).message();
    const PpSimulation sim = run_scaled(s);
    const double expected = double(p - 1) / (v * m + p - 1);
    std::printf("  interleaved p=%d v=%d m=%d bubble %.4f (closed form %.4f)\n", p, v, m, sim.bubble_fraction,
                expected);
    EXPECT_NEAR(sim.bubble_fraction, expected, 1e-9) << "p " << p << " v " << v << " m " << m;
  }
}

TEST(PpSchedule, ZeroBubbleIsAboutAThirdOfOneFOneB) {
  const int cases[][3] = {{2, 2, 4}, {4, 2, 8}, {4, 2, 16}, {8, 2, 16}, {4, 3, 8}};
  for (const auto& c : cases) {
    const int p = c[0], v = c[1], m = c[2];
    const PpSchedule zb = sm::zero_bubble(p, v, m);
    ASSERT_TRUE(sm::validate_schedule(zb).ok()) << sm::validate_schedule(zb).message();
    const PpSimulation z = run_scaled(zb);
    const PpSimulation inter = run_scaled(sm::interleaved(p, v, m));
    const PpSimulation plain = sm::simulate(sm::one_f_one_b(p, m), PpCosts::uniform(p));
    std::printf("  zero_bubble p=%d v=%d m=%d bubble %.4f | interleaved %.4f (ratio %.3f) | 1f1b %.4f (ratio %.3f)\n",
                p, v, m, z.bubble_fraction, inter.bubble_fraction, z.bubble_fraction / inter.bubble_fraction,
                plain.bubble_fraction, z.bubble_fraction / plain.bubble_fraction);
    EXPECT_GT(z.bubble_fraction, 0.0);
    EXPECT_LE(z.bubble_fraction, 0.5 * plain.bubble_fraction);
    EXPECT_LE(z.bubble_fraction, 0.5 * inter.bubble_fraction);
    EXPECT_NEAR(z.bubble_fraction, double(p - 1) / (3 * v * m + p - 1), 1e-9);  // ZB-H1's closed form
    // Memory bound: activations held F..B never exceed interleaved 1F1B's peak (F..BW).
    int inter_peak = 0;
    for (int x : inter.peak_live_activations) inter_peak = std::max(inter_peak, x);
    for (int r = 0; r < p; ++r) EXPECT_LE(z.peak_live_activations[r], inter_peak) << "rank " << r;
  }
}

TEST(PpSchedule, PeakLiveActivations) {
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      const PpSimulation g = sm::simulate(sm::gpipe(p, m), PpCosts::uniform(p));
      EXPECT_EQ(g.peak_live_activations[0], m);
      const PpSimulation o = sm::simulate(sm::one_f_one_b(p, m), PpCosts::uniform(p));
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(o.peak_live_activations[r], p) << "rank " << r;
        EXPECT_EQ(o.peak_live_activations[r], std::min(p - r, m)) << "rank " << r;
      }
    }
  }
}

TEST(PpSchedule, GeneratedSchedulesAreValidOnAGrid) {
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 9; ++m) {
      for (const PpSchedule& s : {sm::gpipe(p, m), sm::one_f_one_b(p, m)})
        EXPECT_TRUE(sm::validate_schedule(s).ok()) << s.kind << " p " << p << " m " << m;
      for (int v = 2; v <= 3; ++v) {
        const PpSchedule z = sm::zero_bubble(p, v, m);
        EXPECT_TRUE(sm::validate_schedule(z).ok()) << "zero_bubble p " << p << " v " << v << " m " << m << "\n"
                                                   << sm::validate_schedule(z).message();
        if (m % p == 0) {
          const PpSchedule i = sm::interleaved(p, v, m);
          EXPECT_TRUE(sm::validate_schedule(i).ok()) << "interleaved p " << p << " v " << v << " m " << m;
        }
      }
    }
}

TEST(PpSchedule, GeneratorsRefuseBadArguments) {
  EXPECT_NE(input_error_of([] { sm::interleaved(4, 2, 6); }).find("multiple of the 4"), std::string::npos);
  EXPECT_NE(input_error_of([] { sm::interleaved(2, 1, 4); }).find("--pp-virtual-stages"), std::string::npos);
  EXPECT_NE(input_error_of([] { sm::zero_bubble(2, 1, 4); }).find("--pp-virtual-stages"), std::string::npos);
  EXPECT_NE(input_error_of([] { sm::gpipe(2, 0); }).find("--pp-microbatches"), std::string::npos);
  EXPECT_NE(input_error_of([] { sm::make_schedule("1f1b", 2, 2, 4); }).find("--pp-virtual-stages 1"),
            std::string::npos);
  EXPECT_NE(input_error_of([] { sm::make_schedule("pipedream", 2, 1, 4); }).find("unknown schedule"),
            std::string::npos);
  EXPECT_EQ(sm::make_schedule("zero_bubble", 2, 2, 4).kind, "zero_bubble");
}

TEST(PpSchedule, TextRoundTrip) {
  for (const PpSchedule& s : {sm::gpipe(3, 4), sm::one_f_one_b(4, 6), sm::interleaved(2, 3, 4),
                              sm::zero_bubble(3, 2, 7)}) {
    const std::string text = sm::to_text(s);
    const PpSchedule back = sm::parse_schedule(text, s.virtual_stages, "roundtrip.txt");
    EXPECT_EQ(back.ranks, s.ranks);
    EXPECT_EQ(back.microbatches, s.microbatches);
    EXPECT_EQ(back.per_rank, s.per_rank) << s.kind;
    EXPECT_EQ(sm::to_text(back), text);
  }
  // Comments and blank lines are skipped.
  const PpSchedule c = sm::parse_schedule("# two ranks\n0F0 0SF0 0RB0 0BW0\n\n1RF0 1F0 1BW0 1SB0\n", 1, "c.txt");
  EXPECT_EQ(c.ranks, 2);
  EXPECT_TRUE(sm::validate_schedule(c).ok()) << sm::validate_schedule(c).message();
}

TEST(PpSchedule, ParseErrorsNameLineAndAction) {
  const std::string bad_token =
      input_error_of([] { sm::parse_schedule("0F0 0SF0 0RB0 0BW0\n1RF0 XF3\n", 1, "schedule.txt"); });
  EXPECT_NE(bad_token.find("schedule.txt:2: action 'XF3'"), std::string::npos) << bad_token;
  const std::string bad_code = input_error_of([] { sm::parse_schedule("0Q1\n", 1, "s.txt"); });
  EXPECT_NE(bad_code.find("s.txt:1: action '0Q1': unknown action 'Q'"), std::string::npos) << bad_code;
  const std::string bad_rank = input_error_of([] { sm::parse_schedule("0F0 1F0\n1F0\n", 1, "s.txt"); });
  EXPECT_NE(bad_rank.find("s.txt:1: action '1F0': stage 1 lives on rank 1"), std::string::npos) << bad_rank;
  const std::string bad_stage = input_error_of([] { sm::parse_schedule("0F0\n5F0\n", 2, "s.txt"); });
  EXPECT_NE(bad_stage.find("s.txt:2: action '5F0': stage 5 does not exist"), std::string::npos) << bad_stage;
  EXPECT_NE(input_error_of([] { sm::parse_schedule("# nothing\n", 1, "e.txt"); }).find("e.txt"), std::string::npos);
}

TEST(PpSimulator, RejectsMissingRecv) {
  const std::string e = validation_errors("0F0 0SF0 0RB0 0BW0\n1F0 1BW0 1SB0\n");
  EXPECT_NE(e.find("rank 1: missing receive '1RF0' for the send '0SF0' on rank 0"), std::string::npos) << e;
}

TEST(PpSimulator, RejectsDeadlock) {
  // Rank 0 waits for the gradient before sending its activation; rank 1 waits for the activation.
  const std::string e = validation_errors("0RB0 0F0 0SF0 0BW0\n1RF0 1F0 1BW0 1SB0\n");
  EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0 waits at '0RB0' for '1SB0' on rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1 waits at '1RF0' for '0SF0' on rank 0"), std::string::npos) << e;
}

TEST(PpSimulator, RejectsOrderErrors) {
  const std::string w_first = validation_errors("0F0 1F0 1B0 1W0 0W0 0B0\n", 2);
  EXPECT_NE(w_first.find("rank 0: '0W0' runs before its input-gradient pass '0B0'"), std::string::npos) << w_first;
  const std::string f_first = validation_errors("0F0 0SF0 0RB0 0BW0\n1F0 1RF0 1BW0 1SB0\n");
  EXPECT_NE(f_first.find("rank 1: '1F0' runs before its receive '1RF0'"), std::string::npos) << f_first;
  const std::string b_early = validation_errors("0BW0 0F0 1F0 1BW0\n", 2);
  EXPECT_NE(b_early.find("'0BW0' runs before its forward '0F0'"), std::string::npos) << b_early;
  // Forwards of a stage out of microbatch order (batch-norm running statistics would differ).
  const std::string swapped = validation_errors("0F1 0F0 1F0 1F1 1BW0 1BW1 0BW0 0BW1\n", 2);
  EXPECT_NE(swapped.find("rank 0: '0F1' runs before the forward of the microbatch before it, '0F0'"),
            std::string::npos)
      << swapped;
}

TEST(PpSimulator, RejectsDuplicatesAndMissingPasses) {
  const std::string dup = validation_errors("0F0 0F0 0SF0 0RB0 0BW0\n1RF0 1F0 1BW0 1SB0\n");
  EXPECT_NE(dup.find("rank 0: action '0F0' is duplicated (positions 0 and 1)"), std::string::npos) << dup;
  const std::string no_w = validation_errors("0F0 1F0 1B0 1W0 0B0\n", 2);
  EXPECT_NE(no_w.find("'0B0' has no weight-gradient pass '0W0'"), std::string::npos) << no_w;
  const std::string both = validation_errors("0F0 1F0 1BW0 0B0 0W0 0BW0\n", 2);
  EXPECT_NE(both.find("both the full backward '0BW0'"), std::string::npos) << both;
  // A transfer between stages on one rank is not a transfer.
  const std::string same = validation_errors("0F0 0SF0 1F0 1BW0 0BW0\n", 2);
  EXPECT_NE(same.find("'0SF0' is a transfer that is not needed"), std::string::npos) << same;
  EXPECT_NE(input_error_of([] { sm::simulate(sm::parse_schedule("0F0\n", 1, "x"), PpCosts::uniform(1)); })
                .find("missing backward"),
            std::string::npos);
}

TEST(PpSimulator, TransfersTakeTimeAndRecvFollowsSend) {
  const PpSchedule s = sm::one_f_one_b(3, 6);
  const PpSimulation free_comm = sm::simulate(s, PpCosts::uniform(3));
  const PpSimulation slow = sm::simulate(s, PpCosts::uniform(3, 1, 1, 1, 0.25));
  EXPECT_GT(slow.makespan, free_comm.makespan);
  int recvs = 0;
  for (int r = 0; r < s.ranks; ++r)
    for (const sm::PpTimedAction& t : slow.per_rank[r]) {
      if (t.action.kind != PpActionKind::RECV_F && t.action.kind != PpActionKind::RECV_B) continue;
      const PpAction send = t.action.kind == PpActionKind::RECV_F
                                ? PpAction{PpActionKind::SEND_F, t.action.stage - 1, t.action.microbatch}
                                : PpAction{PpActionKind::SEND_B, t.action.stage + 1, t.action.microbatch};
      for (const sm::PpTimedAction& u : slow.per_rank[s.rank_of_stage(send.stage)])
        if (u.action == send) {
          EXPECT_GE(t.end, u.end) << sm::to_text(t.action);
        }
      ++recvs;
    }
  EXPECT_EQ(recvs, 2 * 2 * 6);  // two boundaries, both directions, six microbatches
  EXPECT_NE(input_error_of([&] { sm::simulate(s, PpCosts::uniform(2)); }).find("one f, b and w per logical stage"),
            std::string::npos);
}

TEST(PpSimulator, AsciiTimeline) {
  const PpSimulation sim = sm::simulate(sm::gpipe(2, 2), PpCosts::uniform(2));
  EXPECT_DOUBLE_EQ(sim.makespan, 9.0);
  EXPECT_EQ(sm::ascii_timeline(sim, 9),
            "rank 0 |FF...BBBB|\n"
            "rank 1 |.FFBBBB..|\n");
  const PpSimulation zb = run_scaled(sm::zero_bubble(4, 2, 8));
  std::printf("%s", sm::ascii_timeline(zb, 102).c_str());
  EXPECT_NE(sm::ascii_timeline(zb, 40).find('W'), std::string::npos);
}

TEST(PpSchedule, SpecRules) {
  EXPECT_EQ(sm::auto_schedule(true, 1), "zero_bubble");
  EXPECT_EQ(sm::auto_schedule(true, 2), "zero_bubble");
  EXPECT_EQ(sm::auto_schedule(false, 2), "interleaved");
  EXPECT_EQ(sm::auto_schedule(false, 1), "1f1b");

  EXPECT_EQ(sm::default_microbatches(8, 2), 8);
  EXPECT_EQ(sm::default_microbatches(6, 4), 6);
  EXPECT_EQ(sm::default_microbatches(16, 2), 8);
  EXPECT_EQ(sm::default_microbatches(12, 4), 12);
  EXPECT_EQ(sm::default_microbatches(64, 4), 16);
  EXPECT_EQ(sm::default_microbatches(4, 4), 4);
  EXPECT_EQ(sm::default_microbatches(5, 4), 5);  // 5 lies in [4, min(5, 16)] and divides 5
  // None: a prime batch above 4·stages, or a batch smaller than the stages.
  const std::string none = input_error_of([] { sm::default_microbatches(17, 2); });
  EXPECT_NE(none.find("--pp-microbatches: no divisor of the batch size 17 lies in [2, 8]"), std::string::npos) << none;
  EXPECT_NE(input_error_of([] { sm::default_microbatches(3, 4); }).find("--pp-microbatches"), std::string::npos);
  // Interleaved runs microbatches in rounds of P: the default is a multiple of the ranks.
  EXPECT_EQ(sm::default_microbatches(18, 4, 2), 6);  // 9 divides 18 but is odd
  EXPECT_EQ(sm::resolve_microbatches(18, 2, 2, 0, "interleaved", false, ""), 6);
  EXPECT_EQ(sm::resolve_microbatches(18, 2, 2, 0, "auto", false, ""), 6);        // auto -> interleaved
  EXPECT_EQ(sm::resolve_microbatches(18, 2, 2, 0, "zero_bubble", false, ""), 9);  // any count
  EXPECT_EQ(sm::resolve_microbatches(18, 2, 2, 3, "interleaved", false, ""), 3);  // as requested
  EXPECT_NE(input_error_of([] { sm::default_microbatches(15, 4, 2); }).find("multiple of 2"), std::string::npos);

  // Allowed combinations pass.
  sm::check_schedule_choice("1f1b", 1, false, 4, 4);
  sm::check_schedule_choice("gpipe", 1, false, 8, 4);
  sm::check_schedule_choice("interleaved", 2, false, 8, 8);
  sm::check_schedule_choice("zero_bubble", 2, true, 8, 8);
  sm::check_schedule_choice("auto", 2, false, 8, 8);
  sm::check_schedule_choice("auto", 1, false, 2, 2);

  auto msg = [](const std::string& kind, int v, bool delay, int m, int stages) {
    return input_error_of([&] { sm::check_schedule_choice(kind, v, delay, m, stages); });
  };
  const std::string v_1f1b = msg("1f1b", 2, false, 8, 8);
  EXPECT_NE(v_1f1b.find("--pp-schedule 1f1b needs --pp-virtual-stages 1"), std::string::npos) << v_1f1b;
  EXPECT_NE(msg("gpipe", 2, false, 8, 8).find("--pp-virtual-stages 1"), std::string::npos);
  EXPECT_NE(msg("interleaved", 1, false, 8, 4).find("--pp-virtual-stages 2 or more"), std::string::npos);
  EXPECT_NE(msg("zero_bubble", 1, true, 8, 4).find("--pp-virtual-stages 2 or more"), std::string::npos);
  const std::string auto_zb = msg("auto", 1, true, 8, 4);
  EXPECT_NE(auto_zb.find("zero_bubble (chosen by --pp-schedule auto)"), std::string::npos) << auto_zb;
  EXPECT_NE(msg("gpipe", 1, true, 8, 4).find("--pp-delay-wgrad"), std::string::npos);
  // 1f1b and interleaved run whole backwards: a delayed wgrad would be silently ignored.
  EXPECT_NE(msg("1f1b", 1, true, 8, 4).find("--pp-delay-wgrad with --pp-schedule 1f1b"), std::string::npos);
  EXPECT_NE(msg("interleaved", 2, true, 8, 8).find("--pp-delay-wgrad with --pp-schedule interleaved"),
            std::string::npos);
  const std::string few = msg("1f1b", 1, false, 3, 4);
  EXPECT_NE(few.find("--pp-microbatches 3 is fewer than the 4 logical pipeline stages"), std::string::npos) << few;
  EXPECT_NE(msg("interleaved", 2, false, 10, 8).find("multiple of the 4 pipeline ranks"), std::string::npos);
  EXPECT_NE(msg("pipedream", 1, false, 8, 4).find("--pp-schedule pipedream: unknown schedule"), std::string::npos);
}

}  // namespace
