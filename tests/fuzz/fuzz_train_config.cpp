// fuzz_train_config.cpp — libFuzzer harness for the training configuration loader
// (src/train/train_config.cpp TrainConfigResolver::apply_toml_file, validate_train_config,
// layout_options, to_toml): the input is a --config TOML file. Expected outcomes: a
// configuration, or sm::Error naming file and key. Property checked on every accepted file:
// to_toml() is a fixed point — re-applying the serialised configuration to fresh defaults and
// serialising again gives the same text (config.toml in a run directory and in checkpoints
// must reproduce the run's settings), and its validation verdict is the same.
// Seeds: input/configs/*.toml (tests/fuzz/corpus/fuzz_train_config/).
#include <string>

#include "fuzz_util.h"
#include "toml_guard.h"
#include "spikemesh/train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("fuzz_config.toml");
  static const std::string path2 = fuzz::scratch_path("fuzz_config_again.toml");
  static const bool quiet = (fuzz::quiet_logs(), true);
  (void)quiet;
  if (!fuzz::toml_parser_survives(std::string(reinterpret_cast<const char*>(data), size)))
    return 0;  // toml++'s own bugs (toml_guard.h)
  fuzz::write_file(path, data, size);
  sm::TrainConfig cfg;
  sm::TrainConfigResolver r(cfg);
  if (!fuzz::expect_ok_or_input_error([&] { r.apply_toml_file(path); })) return 0;
  const bool valid = fuzz::expect_ok_or_input_error([&] {
    sm::validate_train_config(cfg);
    (void)sm::layout_options(cfg.parallel);
  });
  const std::string text = r.to_toml();
  fuzz::write_file(path2, reinterpret_cast<const uint8_t*>(text.data()), text.size());
  sm::TrainConfig again;
  sm::TrainConfigResolver r2(again);
  try {
    r2.apply_toml_file(path2);
  } catch (const sm::Error& e) {
    fuzz::fail(std::string("to_toml() output does not load back: ") + e.what() + "\n" + text);
  }
  const std::string text2 = r2.to_toml();
  if (text2 != text) fuzz::fail("to_toml() is not a fixed point:\n" + text + "\n---- then ----\n" + text2);
  const bool valid2 = fuzz::expect_ok_or_input_error([&] { sm::validate_train_config(again); });
  if (valid != valid2) fuzz::fail("validate_train_config changes its verdict after a to_toml() round trip");
  return 0;
}
