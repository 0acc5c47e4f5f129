// test_conv_policy.cpp — SPIKEMESH_CONV_ALGOS's names (kernels/conv_policy.h): each valid name
// sets exactly its three switches, empty means exact, and anything else is an InputError that
// names the variable and lists the valid values.
#include <gtest/gtest.h>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/conv_policy.h"

namespace sm {
namespace {

TEST(ConvPolicy, NamesSetTheirSwitches) {
  struct Case {
    const char* value;
    const char* name;
    bool deterministic, imprecise, tuned;
  };
  for (const Case& c :
       {Case{"", "exact", true, false, false}, Case{"exact", "exact", true, false, false},
        Case{"exact-tuned", "exact-tuned", true, false, true}, Case{"deterministic", "deterministic", true, true, false},
        Case{"deterministic-tuned", "deterministic-tuned", true, true, true}, Case{"fast", "fast", false, true, false},
        Case{"fast-tuned", "fast-tuned", false, true, true}}) {
    const ConvPolicy p = conv_policy_from_name(c.value);
    EXPECT_EQ(p.name, c.name) << c.value;
    EXPECT_EQ(p.deterministic, c.deterministic) << c.value;
    EXPECT_EQ(p.allow_imprecise, c.imprecise) << c.value;
    EXPECT_EQ(p.tuned, c.tuned) << c.value;
  }
}

TEST(ConvPolicy, UnknownNameIsAnInputErrorNamingTheVariable) {
  for (const char* bad : {"Fast", "tuned", "fast tuned", "exact-", "-tuned", "fast-tuned-tuned"}) {
    try {
      (void)conv_policy_from_name(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("SPIKEMESH_CONV_ALGOS=") + bad), std::string::npos) << m;
      EXPECT_NE(m.find("exact, deterministic, fast"), std::string::npos) << m;
    }
  }
}

// As a flag (--conv-algos, --conv-fp32-precision) the message reads "FLAG VALUE", as a
// variable "VAR=VALUE"; fp32 precisions are ieee | tf32 ("" = ieee).
TEST(ConvPolicy, FlagSourcesAndFp32PrecisionNames) {
  try {
    (void)conv_policy_from_name("fastest", "--conv-algos");
    ADD_FAILURE() << "fastest accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--conv-algos fastest: unknown convolution policy"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fp32_precision_from_name("", "--conv-fp32-precision"), Fp32Precision::IEEE);
  EXPECT_EQ(fp32_precision_from_name("ieee", "--conv-fp32-precision"), Fp32Precision::IEEE);
  EXPECT_EQ(fp32_precision_from_name("tf32", "--conv-fp32-precision"), Fp32Precision::TF32);
  EXPECT_STREQ(fp32_precision_name(Fp32Precision::TF32), "tf32");
  for (const auto& [source, want] : {std::pair<const char*, const char*>{"--matmul-fp32-precision", "--matmul-fp32-precision fp16"},
                                     {"SPIKEMESH_MATMUL_FP32_PRECISION", "SPIKEMESH_MATMUL_FP32_PRECISION=fp16"}}) {
    try {
      (void)fp32_precision_from_name("fp16", source);
      ADD_FAILURE() << "fp16 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      EXPECT_NE(std::string(e.what()).find(std::string(want) + ": unknown fp32 precision (valid: ieee, tf32)"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace sm
