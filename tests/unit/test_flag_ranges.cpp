// test_flag_ranges.cpp — the one table of numeric flag ranges (core/flag_ranges.h) and the
// bounded text-file reader (core/text_file.h): every numeric key of `train` and every numeric
// option of every subcommand has a documented range; values outside it, NaN/Inf and 64-bit
// overflow are refused naming the flag (or file: key); --threads is bounded by the machine;
// --var on the command line overrides one variable of a --config file; files that are too
// large, endless (/dev/zero), binary or directories are refused naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <toml++/toml.h>
#include <vector>

#include "error_of.h"
#include "spikemesh/app/commands.h"
#include "spikemesh/core/text_file.h"
#include "spikemesh/core/toml_guard.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/train/train_config.h"
#include "train_cli.h"

namespace sm {
namespace {

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

std::string temp_path(const std::string& tag) {
  return ::testing::TempDir() + "sm_fr_" + std::to_string(getpid()) + "_" + tag;
}

TrainConfig resolve(const std::vector<std::string>& args) { return test::resolve_train_args(args); }

}  // namespace

TEST(FlagRanges, EveryNumericTrainKeyHasARange) {
  TrainConfig cfg;
  TrainConfigResolver r(cfg);
  const toml::table t = toml::parse(r.to_toml());
  int numeric = 0;
  for (auto&& [k, node] : t) {
    const std::string key(k.str());
    bool is_number = node.is_integer() || node.is_floating_point();
    if (node.is_array()) is_number = key == "mesh-shape";  // the one numeric list
    if (!is_number) continue;
    ++numeric;
    EXPECT_NE(flag_range(key), nullptr) << "train key '" << key << "' has no documented range";
  }
  EXPECT_GT(numeric, 25);
}

TEST(FlagRanges, EveryNumericOptionOfEverySubcommandHasARange) {
  CLI::App app{"spikemesh"};
  AppEnv env;
  register_all_commands(app, env);
  int checked = 0;
  std::function<void(CLI::App*)> walk = [&](CLI::App* cmd) {
    for (const CLI::Option* o : cmd->get_options()) {
      const std::string type = o->get_type_name();
      const bool numeric = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0;
      if (!numeric || o->get_lnames().empty()) continue;
      const std::string key = o->get_lnames()[0];
      if (key == "hang-rank" || key == "min-bytes" || key == "max-bytes") continue;  // commtest aids with own parsing
      ++checked;
      EXPECT_NE(flag_range(key), nullptr) << cmd->get_name() << " --" << key << " (" << type << ") has no range";
    }
    for (CLI::App* sub : cmd->get_subcommands({})) walk(sub);
  };
  walk(&app);
  EXPECT_GT(checked, 20);
}

TEST(FlagRanges, OutOfRangeNamesFlagValueAndRange) {
  std::string e = error_of([] { check_flag_value("clip-grad-norm", -1, "--clip-grad-norm"); });
  EXPECT_TRUE(has(e, "--clip-grad-norm") && has(e, "-1") && has(e, "[0, ")) << e;
  e = error_of([] { check_flag_value("clip-grad-norm", std::nan(""), "--clip-grad-norm"); });
  EXPECT_TRUE(has(e, "--clip-grad-norm") && has(e, "finite")) << e;
  e = error_of([] { parse_flag_real("lr", "inf", "run.toml: lr"); });
  EXPECT_TRUE(has(e, "run.toml: lr") && has(e, "finite")) << e;
  e = error_of([] { parse_flag_int("pp-virtual-stages", "2147483647", "--pp-virtual-stages"); });
  EXPECT_TRUE(has(e, "--pp-virtual-stages") && has(e, "[1, 1024]")) << e;
  e = error_of([] { parse_flag_int("seed", "99999999999999999999", "--seed"); });
  EXPECT_TRUE(has(e, "--seed") && has(e, "64 bits")) << e;
  e = error_of([] { parse_flag_int("tp-mesh-dim", "5", "--tp-mesh-dim"); });
  EXPECT_TRUE(has(e, "--tp-mesh-dim") && has(e, "[-1, 2]")) << e;
  EXPECT_TRUE(has(error_of([] { parse_flag_int("dp-mesh-dim", "-7", "--dp-mesh-dim"); }), "--dp-mesh-dim"));
  e = error_of([] { parse_flag_int("batch-size", "8x", "--batch-size"); });
  EXPECT_TRUE(has(e, "expected an integer") && has(e, "8x")) << e;
  // In range, bounds included; the sentinel of dropout; an open lower bound.
  EXPECT_EQ(error_of([] { check_flag_value("momentum", 1.0, "--momentum"); }), "");
  EXPECT_EQ(error_of([] { check_flag_value("dropout", -1, "--dropout"); }), "");
  EXPECT_NE(error_of([] { check_flag_value("dropout", -0.5, "--dropout"); }), "");
  EXPECT_NE(error_of([] { check_flag_value("bucket-mb", 0, "--bucket-mb"); }), "");
  EXPECT_EQ(error_of([] { check_flag_value("bucket-mb", 0.5, "--bucket-mb"); }), "");
}

TEST(FlagRanges, ThreadsAreBoundedByTheMachine) {
  const int64_t cpus = machine_cpu_count();
  EXPECT_GE(cpus, 1);
  EXPECT_EQ(error_of([&] { parse_flag_int("threads", std::to_string(cpus), "--threads"); }), "");
  const std::string e = error_of([] { parse_flag_int("threads", "100000", "--threads"); });
  EXPECT_TRUE(has(e, "--threads") && has(e, "100000") && has(e, "CPUs")) << e;
}

TEST(FlagRanges, TrainFlagsAndConfigKeysGoThroughTheTable) {
  EXPECT_TRUE(has(error_of([] { resolve({"--data", "d.h5", "--clip-grad-norm", "-1"}); }), "--clip-grad-norm"));
  EXPECT_TRUE(has(error_of([] { resolve({"--data", "d.h5", "--clip-grad-norm", "nan"}); }), "finite"));
  EXPECT_TRUE(has(error_of([] { resolve({"--data", "d.h5", "--threads", "100000"}); }), "--threads"));
  const std::string p = temp_path("range.toml");
  std::ofstream(p) << "data = \"d.h5\"\nlr = -0.5\n";
  const std::string e = error_of([&] { resolve({"--config", p}); });
  EXPECT_TRUE(has(e, p + ": lr") && has(e, "-0.5")) << e;
  std::remove(p.c_str());
  // The help text documents the range.
  TrainConfig cfg;
  TrainConfigResolver r(cfg);
  CLI::App app{"t"};
  r.add_options(app);
  EXPECT_TRUE(has(app.help(), "range [1, 1024]")) << "pp-virtual-stages range missing from --help";
}

TEST(FlagRanges, VarOnTheCommandLineOverridesOneVariableOfTheConfig) {
  const std::string p = temp_path("vars.toml");
  std::ofstream(p) << "data = \"d.h5\"\nvar = [\"E=64\", \"H=4\", \"L=2\"]\n";
  EXPECT_EQ(resolve({"--config", p, "--var", "E=32"}).vars, (std::vector<std::string>{"E=32", "H=4", "L=2"}));
  EXPECT_EQ(resolve({"--config", p, "--var", "X=1", "--var", "H=8"}).vars,
            (std::vector<std::string>{"E=64", "H=8", "L=2", "X=1"}));
  std::remove(p.c_str());
  std::vector<std::string> v;
  merge_var_assignment(v, "C=1");
  merge_var_assignment(v, "C=2");
  EXPECT_EQ(v, (std::vector<std::string>{"C=2"}));
}

TEST(TextFile, ReadsTextAndRefusesWhatIsNot) {
  const std::string ok = temp_path("ok.txt");
  std::ofstream(ok) << "0F0 0F1\n1B0\t\r\n";
  EXPECT_EQ(read_text_file(ok, "--pp-schedule-file"), "0F0 0F1\n1B0\t\r\n");
  // Larger than the bound: named, with the limit.
  std::string e = error_of([&] { read_text_file(ok, "--pp-schedule-file", 4); });
  EXPECT_TRUE(has(e, "--pp-schedule-file " + ok) && has(e, "larger than")) << e;
  // Endless (a device): bounded, not read until memory runs out.
  e = error_of([] { read_text_file("/dev/zero", "--config", 1 << 20); });
  EXPECT_TRUE(has(e, "--config /dev/zero") && has(e, "more than")) << e;
  // Binary: the offending byte by offset and value, never the raw bytes.
  const std::string bin = temp_path("bin.txt");
  std::ofstream(bin, std::ios::binary) << std::string("0F0\n\x01\x02\xff", 7);
  e = error_of([&] { read_text_file(bin, "model spec"); });
  EXPECT_TRUE(has(e, "not a text file") && has(e, "byte 4 is 0x01")) << e;
  EXPECT_FALSE(has(e, "\x01")) << "raw bytes echoed";
  e = error_of([] { read_text_file("/tmp", "--config"); });
  EXPECT_TRUE(has(e, "directory")) << e;
  e = error_of([] { read_text_file("/nonexistent/x.toml", "--config"); });
  EXPECT_TRUE(has(e, "--config /nonexistent/x.toml") && has(e, "cannot open")) << e;
  std::remove(ok.c_str());
  std::remove(bin.c_str());
  EXPECT_EQ(printable_token(std::string("a\x01\xff", 3)), "a\\x01\\xff");
  EXPECT_EQ(printable_token(std::string(50, 'x'), 10), std::string(10, 'x') + "...");
}

}  // namespace sm

namespace sm {
// The inputs toml++ 3.3.0 would crash on are refused before parsing, naming why; ordinary
// configs (ASCII, arrays of tables, inline tables) pass.
TEST(TomlGuard, RefusesTheParserCrashInputsOnly) {
  EXPECT_EQ(toml_parser_bug_reason("model = \"x\"\n[vars]\nC = 4\n[[unit]]\nname = \"a\"\n"), "");
  EXPECT_EQ(toml_parser_bug_reason("a = [1, 2]\nb = { c = 1 }\n# [} in a comment\n"), "");
  EXPECT_NE(toml_parser_bug_reason("a = 1\n[}\n").find("table header at byte 6"), std::string::npos);
  EXPECT_NE(toml_parser_bug_reason("  [[ ?x]]\n"), "");
  EXPECT_NE(toml_parser_bug_reason("a =\xc2\xa1 1\n").find("U+00A1"), std::string::npos);
  EXPECT_EQ(toml_parser_bug_reason("a = \"\xc2\xa1\"  # \xc2\xa7 4\nb = '\xc2\xa1'\nc = \"\"\"\n\xc2\xa1\"\"\"\n"), "");
  EXPECT_EQ(toml_parser_bug_reason("a =\xc2\xa0 1\n"), "");  // U+00A0 is handled by the parser
  // Through the config reader: one Input error naming the file.
  const std::string p = ::testing::TempDir() + "sm_tg_" + std::to_string(getpid()) + ".toml";
  std::ofstream(p) << "data = \"d.h5\"\n[}\n";
  TrainConfig cfg;
  TrainConfigResolver r(cfg);
  const std::string e = error_of([&] { r.apply_toml_file(p); });
  EXPECT_NE(e.find(p), std::string::npos) << e;
  std::remove(p.c_str());
}
}  // namespace sm
