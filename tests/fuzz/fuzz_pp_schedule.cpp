// fuzz_pp_schedule.cpp — libFuzzer harness for pipeline schedules as text
// (src/parallel/pipeline/pp_schedule.cpp parse_schedule, the --pp-schedule-file reader resolve_schedule,
// and what they feed: src/parallel/pipeline/pp_simulator.cpp validate_schedule, simulate,
// ascii_timeline, simulated_best_partition). Input byte 0 picks the mode:
//  * text (bit 7 clear): virtual stages from byte 0 (1..4; sometimes 0 or huge), the rest is
//    a schedule file. Expected: a schedule or sm::Error. Properties of a parsed schedule:
//    to_text -> parse gives it back; the file path (resolve_schedule), when it accepts the file,
//    parses the same; a
//    schedule that validate_schedule accepts simulates with sane numbers (every action ends
//    after it starts, within the makespan; bubbles in [0, 1]) and draws.
//  * generated (bit 7 set): ranks, virtual stages, microbatches and kind from the next bytes;
//    when check_schedule_choice accepts the combination, make_schedule's schedule must
//    validate, round-trip through text and simulate.
#include <cmath>
#include <string>

#include "fuzz_util.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"

namespace {

bool same(const sm::PpSchedule& a, const sm::PpSchedule& b) {
  return a.ranks == b.ranks && a.virtual_stages == b.virtual_stages && a.microbatches == b.microbatches &&
         a.per_rank == b.per_rank;
}

void check_simulation(const sm::PpSchedule& s, fuzz::Bytes& in) {
  const int stages = s.logical_stages();
  sm::PpCosts costs = sm::PpCosts::uniform(stages, 1 + in.u8() % 4, 1 + in.u8() % 4, in.u8() % 4, in.u8() % 3);
  const sm::PpSimulation sim = sm::simulate(s, costs);
  if (sim.ranks != s.ranks || int(sim.per_rank.size()) != s.ranks) fuzz::fail("simulate: wrong rank count");
  if (!(sim.makespan >= 0) || !std::isfinite(sim.makespan)) fuzz::fail("simulate: bad makespan");
  for (int r = 0; r < s.ranks; ++r) {
    if (sim.per_rank[r].size() != s.per_rank[r].size()) fuzz::fail("simulate: an action went missing");
    for (const sm::PpTimedAction& t : sim.per_rank[r])
      if (!(t.start >= 0 && t.end >= t.start && t.end <= sim.makespan + 1e-9))
        fuzz::fail("simulate: action " + sm::to_text(t.action) + " has times outside [0, makespan]");
    if (!(sim.bubble[r] >= -1e-9 && sim.bubble[r] <= 1 + 1e-9) && sim.makespan > 0)
      fuzz::fail("simulate: bubble of rank " + std::to_string(r) + " outside [0, 1]");
  }
  (void)sm::ascii_timeline(sim, 1 + in.u8() % 80);
  // What `spikemesh plan` does with a schedule: the best partition of some units over its stages.
  const int units = stages + in.u8() % 3;
  if (units <= 8) {
    std::vector<double> unit_costs;
    for (int i = 0; i < units; ++i) unit_costs.push_back(0.5 + in.u8() % 8);
    const std::vector<int> layout = sm::simulated_best_partition(unit_costs, s);
    int sum = 0;
    for (int n : layout) sum += n;
    if (int(layout.size()) != stages || sum != units) fuzz::fail("simulated_best_partition: not a partition");
  }
}

void text_mode(fuzz::Bytes& in, uint8_t mode, const uint8_t* text, size_t n) {
  static const std::string path = fuzz::scratch_path("fuzz_schedule.txt");
  int v = 1 + mode % 4;
  if (mode % 16 == 15) v = 0;
  if (mode % 32 == 14) v = 1 << 20;
  const std::string body(reinterpret_cast<const char*>(text), n);
  sm::PpSchedule s;
  if (!fuzz::expect_ok_or_input_error([&] { s = sm::parse_schedule(body, v, "fuzz.schedule"); })) return;
  if (s.ranks < 1 || s.virtual_stages != v || int(s.per_rank.size()) != s.ranks || s.kind != "custom")
    fuzz::fail("parse_schedule: inconsistent shape");
  sm::PpSchedule back;
  try {
    back = sm::parse_schedule(sm::to_text(s), v, "to_text");
  } catch (const sm::Error& e) {
    fuzz::fail(std::string("to_text output does not parse: ") + e.what());
  }
  if (!same(s, back)) fuzz::fail("to_text -> parse_schedule changed the schedule");
  fuzz::write_file(path, text, n);
  sm::PpSchedule from_file;
  // The file reader may refuse more (e.g. control bytes: not a text file); what it accepts
  // must be what parse_schedule made of the same text.
  if (fuzz::expect_ok_or_input_error(
          [&] { from_file = sm::resolve_schedule("auto", path, s.ranks, v, false, s.microbatches); }) &&
      !same(s, from_file))
    fuzz::fail("resolve_schedule(file) differs from parse_schedule(text)");
  const sm::PpValidation val = sm::validate_schedule(s);
  if (!val.ok()) {
    if (val.message().empty()) fuzz::fail("invalid schedule without a message");
    return;
  }
  fuzz::expect_ok_or_input_error([&] { check_simulation(s, in); });
}

void generated_mode(fuzz::Bytes& in) {
  static const char* kKinds[] = {"gpipe", "1f1b", "interleaved", "zero_bubble", "auto"};
  const int ranks = int(in.range(1, 6)), v = int(in.range(1, 4)), m = int(in.range(1, 24));
  const std::string kind = kKinds[in.u8() % 5];
  const bool delay = in.flag();
  std::string chosen = kind == "auto" ? sm::auto_schedule(delay, v) : kind;
  if (!fuzz::expect_ok_or_input_error([&] { sm::check_schedule_choice(kind, v, delay, m, ranks * v); })) return;
  sm::PpSchedule s;
  try {
    s = sm::make_schedule(chosen, ranks, v, m);
  } catch (const sm::Error& e) {
    fuzz::fail("make_schedule refused a combination check_schedule_choice accepted: " + std::string(e.what()));
  }
  const sm::PpValidation val = sm::validate_schedule(s);
  if (!val.ok()) fuzz::fail("generated " + chosen + " schedule is invalid:\n" + val.message());
  if (!same(s, sm::parse_schedule(sm::to_text(s), v, "to_text"))) fuzz::fail("generated schedule: text round trip");
  try {
    check_simulation(s, in);
  } catch (const sm::Error& e) {
    fuzz::fail("a valid generated schedule does not simulate: " + std::string(e.what()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (fuzz::quiet_logs(), true);
  (void)quiet;
  if (size == 0) return 0;
  fuzz::Bytes in(data, size);
  const uint8_t mode = in.u8();
  if (mode & 0x80) {
    generated_mode(in);
  } else {
    // Simulation parameters come from a copy of the text's bytes: the text is the input.
    fuzz::Bytes sim_bytes(data + 1, size - 1);
    text_mode(sim_bytes, mode, data + 1, size - 1);
  }
  return 0;
}
