// test_train_config.cpp — training configuration resolution (train/train_config.h):
// precedence built-in defaults < --config FILE < flags, errors naming the file and key (unknown
// key, wrong type, list for a scalar key), booleans with --no-<key>, the repeatable `var` list,
// range validation (T >= 1 also for the ModelSelection flags of model/bench), and the resolved
// TOML reading back into the same configuration.
#include <gtest/gtest.h>

#include "error_of.h"
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/app/model_options.h"
#include "spikemesh/core/error.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/models/spec_loader.h"
#include "spikemesh/train/train_config.h"
#include "train_cli.h"

namespace sm {
namespace {

std::string tmp(const std::string& tag) {
  return ::testing::TempDir() + "sm_tc_" + std::to_string(getpid()) + "_" + tag + ".toml";
}

std::string write_file(const std::string& tag, const std::string& text) {
  std::string p = tmp(tag);
  std::ofstream(p) << text;
  return p;
}

using test::parse_and_resolve;
TrainConfig resolve_args(const std::vector<std::string>& args) { return test::resolve_train_args(args); }

}  // namespace

TEST(TrainConfig, DefaultsWhenOnlyDataIsGiven) {
  TrainConfig c = resolve_args({"--data", "d.h5"});
  TrainConfig d;  // the struct's defaults are the documented built-in defaults
  EXPECT_EQ(c.data, "d.h5");
  EXPECT_EQ(c.model, "fmnist_csnn");
  EXPECT_EQ(c.batch_size, 16);
  EXPECT_EQ(c.epochs, 1);
  EXPECT_EQ(c.optimizer, "adam");
  EXPECT_DOUBLE_EQ(c.lr, 1e-3);
  EXPECT_TRUE(c.shuffle);
  EXPECT_TRUE(c.vars.empty());
  EXPECT_EQ(c.keep, d.keep);
  EXPECT_EQ(c.resume, "");
}

TEST(TrainConfig, PrecedenceDefaultsThenConfigFileThenFlags) {
  std::string p = write_file("prec",
                             "batch-size = 32\n"
                             "lr = 0.5\n"
                             "epochs = 3\n"
                             "optimizer = \"sgd\"\n"
                             "data = \"from_file.h5\"\n");
  TrainConfig c = resolve_args({"--config", p, "--batch-size", "8", "--optimizer", "adamw"});
  EXPECT_EQ(c.batch_size, 8);        // flag beats file
  EXPECT_EQ(c.optimizer, "adamw");   // flag beats file
  EXPECT_DOUBLE_EQ(c.lr, 0.5);       // file beats default
  EXPECT_EQ(c.epochs, 3);            // file beats default
  EXPECT_EQ(c.data, "from_file.h5");
  EXPECT_DOUBLE_EQ(c.momentum, 0.9);  // untouched default
  // The order of flags on the command line does not matter: --config given last still loses.
  TrainConfig c2 = resolve_args({"--batch-size", "4", "--config", p});
  EXPECT_EQ(c2.batch_size, 4);
  EXPECT_EQ(c2.optimizer, "sgd");
  std::remove(p.c_str());
}

TEST(TrainConfig, UnknownConfigKeyNamesFileAndKey) {
  std::string p = write_file("unknown", "data = \"x.h5\"\nbatch_sise = 4\n");
  std::string e = error_of([&] { resolve_args({"--config", p}); });
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_NE(e.find("batch_sise"), std::string::npos) << e;
  std::remove(p.c_str());
}

TEST(TrainConfig, WrongTypeInConfigNamesFileAndKey) {
  struct Case {
    const char* text;
    const char* key;
  };
  for (Case k : {Case{"batch-size = \"big\"\n", "batch-size"}, Case{"epochs = 1.5\n", "epochs"},
                 Case{"lr = true\n", "lr"}, Case{"shuffle = 3\n", "shuffle"},
                 Case{"seed = [1, 2]\n", "seed"}, Case{"lr = { a = 1 }\n", "lr"}}) {
    std::string p = write_file("type", std::string("data = \"x.h5\"\n") + k.text);
    std::string e = error_of([&] { resolve_args({"--config", p}); });
    EXPECT_NE(e.find(p), std::string::npos) << k.text << " -> " << e;
    EXPECT_NE(e.find(k.key), std::string::npos) << k.text << " -> " << e;
    std::remove(p.c_str());
  }
}

TEST(TrainConfig, WrongTypeOnCommandLineNamesFlag) {
  std::string e = error_of([&] { resolve_args({"--data", "x.h5", "--batch-size", "eight"}); });
  EXPECT_NE(e.find("--batch-size"), std::string::npos) << e;
  e = error_of([&] { resolve_args({"--data", "x.h5", "--lr", "fast"}); });
  EXPECT_NE(e.find("--lr"), std::string::npos) << e;
}

TEST(TrainConfig, SyntaxErrorAndMissingFileNameTheFile) {
  std::string p = write_file("syntax", "data = \"x.h5\"\nbatch-size = = 3\n");
  std::string e = error_of([&] { resolve_args({"--config", p}); });
  EXPECT_NE(e.find(p + ":2"), std::string::npos) << e;  // file:line
  std::remove(p.c_str());
  std::string missing = tmp("does_not_exist");
  e = error_of([&] { resolve_args({"--config", missing}); });
  EXPECT_NE(e.find(missing), std::string::npos) << e;
}

TEST(TrainConfig, UnknownFlagIsAParseError) {
  EXPECT_THROW(resolve_args({"--data", "x.h5", "--bogus-flag", "1"}), CLI::ParseError);
}

TEST(TrainConfig, BooleansAndNoPrefix) {
  EXPECT_FALSE(resolve_args({"--data", "x", "--no-shuffle"}).shuffle);
  EXPECT_TRUE(resolve_args({"--data", "x", "--shuffle"}).shuffle);
  EXPECT_TRUE(resolve_args({"--data", "x", "--nesterov"}).nesterov);
  std::string p = write_file("bool", "data = \"x\"\nshuffle = false\nnesterov = true\n");
  TrainConfig c = resolve_args({"--config", p});
  EXPECT_FALSE(c.shuffle);
  EXPECT_TRUE(c.nesterov);
  c = resolve_args({"--config", p, "--shuffle", "--no-nesterov"});  // flags win both ways
  EXPECT_TRUE(c.shuffle);
  EXPECT_FALSE(c.nesterov);
  std::remove(p.c_str());
}

TEST(TrainConfig, VarIsAListKey) {
  std::string p = write_file("var", "data = \"x\"\nvar = [\"C=4\", \"K=2\"]\n");
  TrainConfig c = resolve_args({"--config", p});
  EXPECT_EQ(c.vars, (std::vector<std::string>{"C=4", "K=2"}));
  // Each flag overrides its own variable; the file's others stay (as every other flag
  // overrides one key): C replaced in place, K kept, Z added.
  c = resolve_args({"--config", p, "--var", "C=8", "--var", "Z=1"});
  EXPECT_EQ(c.vars, (std::vector<std::string>{"C=8", "K=2", "Z=1"}));
  std::remove(p.c_str());
  // A single string is a one-element list.
  p = write_file("var1", "data = \"x\"\nvar = \"C=16\"\n");
  EXPECT_EQ(resolve_args({"--config", p}).vars, (std::vector<std::string>{"C=16"}));
  std::remove(p.c_str());
  // A list for a scalar key is an error naming the key.
  p = write_file("list", "data = \"x\"\nmodel = [\"a\", \"b\"]\n");
  std::string e = error_of([&] { resolve_args({"--config", p}); });
  EXPECT_NE(e.find("model"), std::string::npos) << e;
  EXPECT_NE(e.find(p), std::string::npos) << e;
  std::remove(p.c_str());
}

TEST(TrainConfig, ValidationNamesTheFlag) {
  struct Case {
    std::vector<std::string> args;
    const char* flag;
  };
  for (const Case& k : {Case{{"--batch-size", "0"}, "--batch-size"}, Case{{"--batch-size", "-3"}, "--batch-size"},
                        Case{{"--epochs", "-1"}, "--epochs"}, Case{{"--max-steps", "-1"}, "--max-steps"},
                        Case{{"--keep", "0"}, "--keep"}, Case{{"--log-every", "0"}, "--log-every"},
                        Case{{"--lr", "-0.1"}, "--lr"}, Case{{"--encoding", "rate"}, "--encoding"},
                        Case{{"--precision", "fp8"}, "--precision"}, Case{{"--run-name", "a/b"}, "--run-name"},
                        Case{{"--optimizer", "lamb"}, "--optimizer"}, Case{{"--lr-schedule", "poly"}, "--lr-schedule"},
                        Case{{"--lr-schedule", "step"}, "--lr-step-size"}}) {
    std::vector<std::string> args = {"--data", "x.h5"};
    args.insert(args.end(), k.args.begin(), k.args.end());
    std::string e = error_of([&] { resolve_args(args); });
    EXPECT_NE(e.find(k.flag), std::string::npos) << k.args[0] << " " << k.args[1] << " -> '" << e << "'";
  }
  // Batch size from a config file is validated too.
  std::string p = write_file("bs0", "data = \"x\"\nbatch-size = 0\n");
  EXPECT_NE(error_of([&] { resolve_args({"--config", p}); }).find("batch-size"), std::string::npos);
  std::remove(p.c_str());
  // epochs = 0 is allowed (evaluate only); data is required.
  EXPECT_EQ(resolve_args({"--data", "x", "--epochs", "0"}).epochs, 0);
  EXPECT_NE(error_of([&] { resolve_args({}); }).find("--data"), std::string::npos);
}

// T < 1 is an error naming --T wherever it comes from: train's --T, a --config file (where
// 0, as a resolved config.toml records "not given", still means the spec's/dataset's T), and
// the --T of model/bench/dump-grads (ModelSelection, CLI and programmatic).
TEST(TrainConfig, TimeStepsBelowOneNameTheFlag) {
  for (const char* t : {"0", "-1", "-100"}) {
    std::string e = error_of([&] { resolve_args({"--data", "x.h5", "--T", t}); });
    EXPECT_NE(e.find("--T must be >= 1"), std::string::npos) << "--T " << t << " -> '" << e << "'";
  }
  EXPECT_EQ(resolve_args({"--data", "x.h5", "--T", "1"}).T, 1);
  EXPECT_EQ(resolve_args({"--data", "x.h5"}).T, 0);  // not given: the spec's / dataset's
  EXPECT_NE(error_of([&] { resolve_args({"--data", "x.h5", "--T", "99999999999"}); }).find("--T"), std::string::npos);

  std::string neg = write_file("tneg", "data = \"x\"\nT = -2\n");
  std::string e = error_of([&] { resolve_args({"--config", neg}); });
  EXPECT_NE(e.find(neg + ": T"), std::string::npos) << e;
  EXPECT_NE(e.find("--T"), std::string::npos) << e;
  std::remove(neg.c_str());
  std::string zero = write_file("tzero", "data = \"x\"\nT = 0\n");
  EXPECT_EQ(resolve_args({"--config", zero}).T, 0);
  // ... and a flag still overrides the file, and is checked.
  EXPECT_NE(error_of([&] { resolve_args({"--config", zero, "--T", "0"}); }).find("--T"), std::string::npos);
  std::remove(zero.c_str());
  TrainConfig c;
  c.data = "x.h5";
  c.T = -1;
  EXPECT_NE(error_of([&] { validate_train_config(c); }).find("--T"), std::string::npos);

  // ModelSelection (model, bench, dump-grads): the flag's validator and the struct itself.
  for (const char* t : {"0", "-3", "four"}) {
    ModelSelection sel;
    CLI::App app{"test"};
    add_model_options(app, sel);
    std::vector<const char*> argv = {"spikemesh-model", "--model", "fmnist_csnn", "--T", t};
    std::string what;
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& pe) {
      what = pe.what();
    }
    EXPECT_NE(what.find("--T"), std::string::npos) << "--T " << t << " -> '" << what << "'";
  }
  ModelSelection sel;
  sel.model = "fmnist_csnn";
  sel.T = -1;
  EXPECT_NE(error_of([&] { sel.overrides(); }).find("--T must be >= 1"), std::string::npos);
  sel.T = 0;  // not given
  EXPECT_FALSE(sel.overrides().T.has_value());
  sel.T = 3;
  EXPECT_EQ(sel.overrides().T.value_or(0), 3);
}

TEST(TrainConfig, ResolvedTomlReadsBackIntoTheSameConfig) {
  TrainConfig a;
  TrainConfigResolver ra(a);
  // Every value differs from its default, doubles that need all 17 digits included.
  parse_and_resolve(ra,
                    {"--model", "cifar10dvs_vgg", "--var", "C=4", "--var", "N=7", "--T", "3", "--dropout", "0.25",
                     "--data", "some/data.h5", "--encoding", "poisson", "--no-shuffle", "--epochs", "5",
                     "--batch-size", "12", "--max-steps", "99", "--optimizer", "sgd", "--lr", "0.1234567890123457",
                     "--weight-decay", "3.0000000000000001e-05", "--momentum", "0.8", "--nesterov", "--lr-schedule",
                     "cosine", "--warmup-steps", "4", "--min-lr", "1e-7", "--lr-step-size", "9", "--lr-gamma", "0.5",
                     "--clip-grad-norm", "2.5", "--seed", "77", "--precision", "fp64", "--threads", "2", "--output",
                     "out dir", "--run-name", "exp \"quoted\"", "--ckpt-every", "6", "--keep", "2", "--resume",
                     "auto", "--log-every", "3", "--eval-batch-size", "5"});
  a.lr = 1.0 / 3.0;  // not representable in fewer than 17 significant digits
  std::string toml = ra.to_toml();
  std::string p = write_file("roundtrip", toml);
  TrainConfig b;
  b.vars = {};
  TrainConfigResolver rb(b);
  rb.apply_toml_file(p);
  std::remove(p.c_str());
  EXPECT_EQ(b.model, a.model);
  EXPECT_EQ(b.vars, a.vars);
  EXPECT_EQ(b.T, 3);
  EXPECT_EQ(b.dropout, 0.25);
  EXPECT_EQ(b.data, "some/data.h5");
  EXPECT_EQ(b.encoding, "poisson");
  EXPECT_FALSE(b.shuffle);
  EXPECT_EQ(b.epochs, 5);
  EXPECT_EQ(b.batch_size, 12);
  EXPECT_EQ(b.max_steps, 99);
  EXPECT_EQ(b.optimizer, "sgd");
  EXPECT_EQ(b.lr, 1.0 / 3.0);  // bitwise
  EXPECT_EQ(b.weight_decay, a.weight_decay);
  EXPECT_EQ(b.momentum, 0.8);
  EXPECT_TRUE(b.nesterov);
  EXPECT_EQ(b.lr_schedule, "cosine");
  EXPECT_EQ(b.warmup_steps, 4);
  EXPECT_EQ(b.min_lr, 1e-7);
  EXPECT_EQ(b.lr_step_size, 9);
  EXPECT_EQ(b.lr_gamma, 0.5);
  EXPECT_EQ(b.clip_grad_norm, 2.5);
  EXPECT_EQ(b.seed, 77);
  EXPECT_EQ(b.precision, "fp64");
  EXPECT_EQ(b.threads, 2);
  EXPECT_EQ(b.output, "out dir");
  EXPECT_EQ(b.run_name, "exp \"quoted\"");
  EXPECT_EQ(b.ckpt_every, 6);
  EXPECT_EQ(b.keep, 2);
  EXPECT_EQ(b.resume, "auto");
  EXPECT_EQ(b.log_every, 3);
  EXPECT_EQ(b.eval_batch_size, 5);
  EXPECT_EQ(rb.to_toml(), toml);
}

}  // namespace sm

namespace sm {

// The GPU numerics keys (train/gpu_numerics_flags.h): flags and --config keys of the same names,
// flags over the file, "" when neither gives one (the front end resolves the environment and a
// resumed record), names checked by validation naming the flag, and the resolved names written
// to and read back from config.toml.
TEST(TrainConfig, GpuNumericsKeysFromFileAndFlagsRoundTrip) {
  TrainConfig none = resolve_args({"--data", "d.h5"});
  EXPECT_EQ(none.gpu_numerics.conv_algos + none.gpu_numerics.conv_fp32_precision +
                none.gpu_numerics.matmul_fp32_precision,
            "");
  const std::string p = write_file("numerics",
                                   "data = 'd.h5'\nconv-algos = 'deterministic-tuned'\nconv-fp32-precision = 'tf32'\n"
                                   "matmul-fp32-precision = 'tf32'\n");
  TrainConfig c;
  TrainConfigResolver r(c);
  CLI::App app{"test"};  // kept alive: given_keys() asks the parsed options
  r.add_options(app);
  std::vector<const char*> argv{"spikemesh-train", "--config", p.c_str(), "--matmul-fp32-precision", "ieee"};
  app.parse(static_cast<int>(argv.size()), argv.data());
  r.resolve();
  EXPECT_EQ(c.gpu_numerics.conv_algos, "deterministic-tuned");
  EXPECT_EQ(c.gpu_numerics.conv_fp32_precision, "tf32");
  EXPECT_EQ(c.gpu_numerics.matmul_fp32_precision, "ieee");  // the flag over the file
  EXPECT_TRUE(r.given_keys().count("matmul-fp32-precision"));
  EXPECT_TRUE(r.given_keys().count("conv-algos"));
  const std::string toml = r.to_toml();
  for (const char* line : {"conv-algos = 'deterministic-tuned'", "conv-fp32-precision = 'tf32'",
                           "matmul-fp32-precision = 'ieee'"})
    EXPECT_NE(toml.find(line), std::string::npos) << line << "\n" << toml;
  TrainConfig b;
  TrainConfigResolver rb(b);
  rb.apply_toml_text(toml, "config.toml");
  EXPECT_EQ(b.gpu_numerics.conv_algos, "deterministic-tuned");
  EXPECT_EQ(b.gpu_numerics.matmul_fp32_precision, "ieee");
  EXPECT_EQ(recorded_gpu_numerics(toml, "config.toml").conv_fp32_precision, "tf32");  // what a resume reads
  std::remove(p.c_str());
  for (const auto& [flag, bad] : {std::pair<std::string, std::string>{"--conv-algos", "fastest"},
                                  {"--conv-fp32-precision", "fp16"}, {"--matmul-fp32-precision", "TF32"}}) {
    const std::string m = error_of([&] { resolve_args({"--data", "d.h5", flag, bad}); });
    EXPECT_NE(m.find(flag + " " + bad + ": unknown"), std::string::npos) << m;
  }
}

}  // namespace sm
