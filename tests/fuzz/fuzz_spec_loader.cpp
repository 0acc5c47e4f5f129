// fuzz_spec_loader.cpp — libFuzzer harness for the model-spec TOML loader
// (src/models/spec_loader.cpp load_model_spec): the input is the text of a spec file,
// written to a scratch file and loaded. Expected outcomes: a Model, or sm::Error naming the
// problem. A loaded model must be usable: its parameter count, per-unit output shapes and
// summary are computed (they walk every layer's shapes), and its output per sample must be
// [num_classes]. Seeds: input/models/*.toml (tests/fuzz/corpus/fuzz_spec_loader/).
#include <string>

#include "fuzz_util.h"
#include "toml_guard.h"
#include "spikemesh/models/spec_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("fuzz_spec.toml");
  static const bool quiet = (fuzz::quiet_logs(), true);
  (void)quiet;
  if (!fuzz::toml_parser_survives(std::string(reinterpret_cast<const char*>(data), size)))
    return 0;  // toml++'s own bugs (toml_guard.h)
  fuzz::write_file(path, data, size);
  fuzz::expect_ok_or_input_error([&] {
    std::unique_ptr<sm::Model> m = sm::load_model_spec(path);
    if (!m || m->units.empty() || !m->loss) fuzz::fail("load_model_spec returned an incomplete model");
    (void)m->num_parameters();
    const std::vector<sm::Shape> outs = m->unit_output_shapes();
    if (outs.size() != m->units.size()) fuzz::fail("unit_output_shapes: one shape per unit expected");
    if (outs.back() != sm::Shape{m->info.num_classes})
      fuzz::fail("loaded model's output " + sm::shape_str(outs.back()) + " is not [num_classes]");
    (void)m->summary();
  });
  return 0;
}
