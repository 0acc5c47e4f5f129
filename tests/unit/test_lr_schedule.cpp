// test_lr_schedule.cpp — LrSchedule against closed forms (PyTorch LinearLR warm-up, StepLR,
// CosineAnnealingLR) and hand-computed literals; invalid configs raise input errors.
#include <gtest/gtest.h>

#include <cmath>

#include "spikemesh/core/error.h"
#include "spikemesh/optim/lr_schedule.h"

namespace {

using sm::LrSchedule;
using sm::LrScheduleConfig;

const double kPi = std::acos(-1.0);

LrScheduleConfig cfg(const char* kind, double base) {
  LrScheduleConfig c;
  c.kind = kind;
  c.base_lr = base;
  return c;
}

TEST(LrSchedule, ConstantIsBaseEverywhere) {
  LrSchedule s(cfg("constant", 0.05));
  for (int64_t t : {0, 1, 7, 1000000}) EXPECT_EQ(s.lr_at(t), 0.05) << t;
}

TEST(LrSchedule, ConstantWithLinearWarmup) {
  LrScheduleConfig c = cfg("constant", 0.2);
  c.warmup_steps = 4;
  c.warmup_start_factor = 0.0;
  LrSchedule s(c);
  // Hand values: 0, 0.05, 0.1, 0.15, then 0.2 from step 4 on.
  const double want[] = {0.0, 0.05, 0.1, 0.15, 0.2, 0.2, 0.2};
  for (int t = 0; t < 7; ++t) EXPECT_NEAR(s.lr_at(t), want[t], 1e-16) << t;

  c.warmup_start_factor = 0.25;
  LrSchedule s2(c);
  for (int t = 0; t < 4; ++t)
    EXPECT_NEAR(s2.lr_at(t), 0.2 * (0.25 + 0.75 * t / 4.0), 1e-16) << t;
  EXPECT_NEAR(s2.lr_at(0), 0.05, 1e-16);
  EXPECT_EQ(s2.lr_at(4), 0.2);
}

TEST(LrSchedule, StepDecaysEveryStepSize) {
  LrScheduleConfig c = cfg("step", 0.1);
  c.step_size = 3;
  c.gamma = 0.5;
  LrSchedule s(c);
  const double want[] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125};
  for (int t = 0; t < 10; ++t) EXPECT_NEAR(s.lr_at(t), want[t], 1e-17) << t;
  EXPECT_NEAR(s.lr_at(30), 0.1 * std::pow(0.5, 10), 1e-20);
}

TEST(LrSchedule, StepAfterWarmup) {
  LrScheduleConfig c = cfg("step", 1.0);
  c.step_size = 2;
  c.gamma = 0.1;
  c.warmup_steps = 2;
  c.warmup_start_factor = 0.5;
  LrSchedule s(c);
  const double want[] = {0.5, 0.75, 1.0, 1.0, 0.1, 0.1, 0.01};
  for (int t = 0; t < 7; ++t) EXPECT_NEAR(s.lr_at(t), want[t], 1e-15) << t;
}

TEST(LrSchedule, CosineClosedForm) {
  LrScheduleConfig c = cfg("cosine", 0.1);
  c.total_steps = 8;
  c.min_lr = 0.001;
  LrSchedule s(c);
  for (int t = 0; t <= 8; ++t) {
    const double want = 0.001 + (0.1 - 0.001) * (1.0 + std::cos(kPi * t / 8.0)) / 2.0;
    EXPECT_NEAR(s.lr_at(t), want, 1e-16) << t;
  }
  EXPECT_NEAR(s.lr_at(0), 0.1, 1e-17);
  EXPECT_NEAR(s.lr_at(4), (0.1 + 0.001) / 2.0, 1e-17);
  EXPECT_NEAR(s.lr_at(8), 0.001, 1e-17);
}

TEST(LrSchedule, CosineHandValues) {
  LrScheduleConfig c = cfg("cosine", 1.0);
  c.total_steps = 4;
  LrSchedule s(c);
  // (1 + cos(pi/4))/2 = 0.853553390593..., (1 + cos(3pi/4))/2 = 0.146446609406...
  EXPECT_NEAR(s.lr_at(1), 0.8535533905932737, 1e-15);
  EXPECT_NEAR(s.lr_at(2), 0.5, 1e-15);
  EXPECT_NEAR(s.lr_at(3), 0.1464466094067262, 1e-15);
  EXPECT_NEAR(s.lr_at(4), 0.0, 1e-15);
  EXPECT_NEAR(s.lr_at(6), 0.5, 1e-15);  // PyTorch's closed form is periodic past T_max
}

TEST(LrSchedule, CosineWithWarmup) {
  LrScheduleConfig c = cfg("cosine", 0.4);
  c.warmup_steps = 5;
  c.warmup_start_factor = 0.1;
  c.total_steps = 10;  // T_max, counted after warm-up
  c.min_lr = 0.0;
  LrSchedule s(c);
  for (int t = 0; t < 5; ++t) EXPECT_NEAR(s.lr_at(t), 0.4 * (0.1 + 0.9 * t / 5.0), 1e-16) << t;
  for (int t = 5; t <= 15; ++t) {
    const double want = 0.4 * (1.0 + std::cos(kPi * (t - 5) / 10.0)) / 2.0;
    EXPECT_NEAR(s.lr_at(t), want, 1e-16) << t;
  }
  EXPECT_NEAR(s.lr_at(5), 0.4, 1e-17);   // warm-up ends exactly at base
  EXPECT_NEAR(s.lr_at(10), 0.2, 1e-16);  // half-way through the cosine
  EXPECT_NEAR(s.lr_at(15), 0.0, 1e-16);
}

template <class F>
void expect_input_error(F&& f, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error thrown";
  } catch (const sm::Error& e) {
    EXPECT_EQ(e.kind(), sm::ErrorKind::Input) << what << ": " << e.what();
  }
}

TEST(LrSchedule, BadConfigsThrowInputError) {
  auto bad = [](LrScheduleConfig c, const char* what) {
    expect_input_error([c] { LrSchedule s(c); }, what);
  };
  bad(cfg("linear", 0.1), "unknown kind");
  bad(cfg("constant", -0.1), "negative base_lr");
  bad(cfg("constant", std::nan("")), "NaN base_lr");
  LrScheduleConfig c = cfg("constant", 0.1);
  c.warmup_steps = -1;
  bad(c, "negative warmup_steps");
  c = cfg("constant", 0.1);
  c.warmup_start_factor = 1.5;
  bad(c, "warmup_start_factor > 1");
  c.warmup_start_factor = -0.1;
  bad(c, "warmup_start_factor < 0");
  c = cfg("step", 0.1);  // step_size defaults to 0
  bad(c, "step without step_size");
  c.step_size = 5;
  c.gamma = 0.0;
  bad(c, "gamma 0");
  c = cfg("cosine", 0.1);  // total_steps defaults to 0
  bad(c, "cosine without total_steps");
  c.total_steps = 10;
  c.min_lr = -1e-3;
  bad(c, "negative min_lr");
  // Fields that a kind does not use are not validated.
  c = cfg("constant", 0.1);
  c.step_size = -3;
  c.total_steps = -3;
  EXPECT_EQ(LrSchedule(c).lr_at(3), 0.1);
}

}  // namespace
