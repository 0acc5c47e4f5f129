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

}  // namespace
}  // namespace sm
