// pp_schedule.cpp — the schedule generators, the text form and the docs/semantics.md §6 rules
// (pp_schedule.h). Generators first build each rank's COMPUTE order (F, B, W, BW), then
// add_transfers inserts the SEND/RECV actions around it, so every kind gets the same
// transfer placement: RECV right before the consuming action, SEND right after the producer.
#include "spikemesh/parallel/pipeline/pp_schedule.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/text_file.h"

namespace sm {

const char* pp_action_code(PpActionKind kind) {
  switch (kind) {
    case PpActionKind::F: return "F";
    case PpActionKind::B: return "B";
    case PpActionKind::W: return "W";
    case PpActionKind::BW: return "BW";
    case PpActionKind::SEND_F: return "SF";
    case PpActionKind::RECV_F: return "RF";
    case PpActionKind::SEND_B: return "SB";
    case PpActionKind::RECV_B: return "RB";
  }
  return "?";
}

bool is_compute(PpActionKind kind) {
  return kind == PpActionKind::F || kind == PpActionKind::B || kind == PpActionKind::W ||
         kind == PpActionKind::BW;
}

std::string to_text(const PpAction& action) {
  return std::to_string(action.stage) + pp_action_code(action.kind) + std::to_string(action.microbatch);
}

namespace {

using RankOrder = std::vector<std::vector<PpAction>>;

PpAction act(PpActionKind kind, int stage, int microbatch) { return PpAction{kind, stage, microbatch}; }

void check_sizes(const char* kind, int ranks, int virtual_stages, int microbatches) {
  if (ranks < 1) SM_INPUT_ERROR(kind << " schedule: need at least one pipeline rank (got " << ranks << ")");
  if (virtual_stages < 1)
    SM_INPUT_ERROR(kind << " schedule: --pp-virtual-stages must be at least 1 (got " << virtual_stages << ")");
  if (microbatches < 1)
    SM_INPUT_ERROR(kind << " schedule: --pp-microbatches must be at least 1 (got " << microbatches << ")");
}

// Wraps each compute action with the transfers it needs (header comment of pp_schedule.h).
PpSchedule add_transfers(const RankOrder& compute, int ranks, int virtual_stages, int microbatches,
                         const std::string& kind) {
  PpSchedule s;
  s.ranks = ranks;
  s.virtual_stages = virtual_stages;
  s.microbatches = microbatches;
  s.kind = kind;
  s.per_rank.resize(ranks);
  const int last = s.logical_stages() - 1;
  for (int r = 0; r < ranks; ++r) {
    std::vector<PpAction>& out = s.per_rank[r];
    for (const PpAction& a : compute[r]) {
      SM_CHECK(s.rank_of_stage(a.stage) == r, "action " << to_text(a) << " generated on rank " << r);
      const bool prev_remote = a.stage > 0 && s.rank_of_stage(a.stage - 1) != r;
      const bool next_remote = a.stage < last && s.rank_of_stage(a.stage + 1) != r;
      switch (a.kind) {
        case PpActionKind::F:
          if (prev_remote) out.push_back(act(PpActionKind::RECV_F, a.stage, a.microbatch));
          out.push_back(a);
          if (next_remote) out.push_back(act(PpActionKind::SEND_F, a.stage, a.microbatch));
          break;
        case PpActionKind::B:
        case PpActionKind::BW:
          if (next_remote) out.push_back(act(PpActionKind::RECV_B, a.stage, a.microbatch));
          out.push_back(a);
          if (prev_remote) out.push_back(act(PpActionKind::SEND_B, a.stage, a.microbatch));
          break;
        default: out.push_back(a); break;
      }
    }
  }
  return s;
}

// Megatron's order of a rank's (logical stage, microbatch) pairs with v chunks: microbatches
// in rounds of P (the last round may be shorter); within a round, forwards run chunk 0 for
// the round's microbatches, then chunk 1, ...; backwards run the chunks in reverse.
std::vector<PpAction> interleaved_order(PpActionKind kind, int rank, int ranks, int virtual_stages,
                                        int microbatches, bool reverse_chunks) {
  std::vector<PpAction> out;
  for (int round = 0; round < microbatches; round += ranks) {
    const int round_end = std::min(microbatches, round + ranks);
    for (int c = 0; c < virtual_stages; ++c) {
      const int chunk = reverse_chunks ? virtual_stages - 1 - c : c;
      for (int mb = round; mb < round_end; ++mb) out.push_back(act(kind, chunk * ranks + rank, mb));
    }
  }
  return out;
}

}  // namespace

PpSchedule gpipe(int ranks, int microbatches) {
  check_sizes("gpipe", ranks, 1, microbatches);
  RankOrder compute(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (int mb = 0; mb < microbatches; ++mb) compute[r].push_back(act(PpActionKind::F, r, mb));
    for (int mb = 0; mb < microbatches; ++mb) compute[r].push_back(act(PpActionKind::BW, r, mb));
  }
  return add_transfers(compute, ranks, 1, microbatches, "gpipe");
}

PpSchedule one_f_one_b(int ranks, int microbatches) {
  check_sizes("1f1b", ranks, 1, microbatches);
  RankOrder compute(ranks);
  for (int r = 0; r < ranks; ++r) {
    const int warmup = std::min(ranks - r - 1, microbatches);
    std::vector<PpAction>& out = compute[r];
    for (int mb = 0; mb < warmup; ++mb) out.push_back(act(PpActionKind::F, r, mb));
    for (int k = 0; k < microbatches - warmup; ++k) {
      out.push_back(act(PpActionKind::F, r, warmup + k));
      out.push_back(act(PpActionKind::BW, r, k));
    }
    for (int mb = microbatches - warmup; mb < microbatches; ++mb) out.push_back(act(PpActionKind::BW, r, mb));
  }
  return add_transfers(compute, ranks, 1, microbatches, "1f1b");
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: on rank r the m·v forwards and
// m·v full backwards follow interleaved_order; the first `warmup` forwards run alone, with
// warmup = 2·(P−r−1) + (v−1)·P (capped at m·v; all of them when m = P), then each step runs
// the next forward and the oldest pending backward, then the remaining backwards.
PpSchedule interleaved(int ranks, int virtual_stages, int microbatches) {
  check_sizes("interleaved", ranks, virtual_stages, microbatches);
  if (virtual_stages < 2)
    SM_INPUT_ERROR("interleaved schedule needs --pp-virtual-stages >= 2 (got " << virtual_stages
                   << "); with one stage per rank use 1f1b");
  if (microbatches % ranks != 0)
    SM_INPUT_ERROR("interleaved schedule: --pp-microbatches " << microbatches << " must be a multiple of the "
                   << ranks << " pipeline ranks (Megatron's interleaved 1F1B runs microbatches in rounds of "
                   << ranks << ")");
  RankOrder compute(ranks);
  const int total = microbatches * virtual_stages;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<PpAction> fwd =
        interleaved_order(PpActionKind::F, r, ranks, virtual_stages, microbatches, false);
    const std::vector<PpAction> bwd =
        interleaved_order(PpActionKind::BW, r, ranks, virtual_stages, microbatches, true);
    const int warmup = microbatches == ranks
                           ? total
                           : std::min(total, 2 * (ranks - r - 1) + (virtual_stages - 1) * ranks);
    std::vector<PpAction>& out = compute[r];
    for (int k = 0; k < warmup; ++k) out.push_back(fwd[k]);
    for (int k = 0; k < total - warmup; ++k) {
      out.push_back(fwd[warmup + k]);
      out.push_back(bwd[k]);
    }
    for (int k = total - warmup; k < total; ++k) out.push_back(bwd[k]);
  }
  return add_transfers(compute, ranks, virtual_stages, microbatches, "interleaved");
}

// ZB-H1 on the interleaved placement. A deterministic list schedule, simulated on unit costs
// (F = B = W = 1 per logical stage, free transfers) in integer time steps. At each step every
// idle rank starts, in this priority:
//   1. a ready B (its F done on this rank and the B of the next stage done; on the last
//      stage just its F), the earliest in Megatron's backward order (interleaved_order);
//   2. else its next forward in Megatron's forward order (strictly in order) if its input is
//      ready and the rank holds fewer than `limit` microbatch-stages in flight, where
//      "in flight" runs from F to W (W keeps inputs alive) and limit = 2·(P−1) + (v−1)·P + 1,
//      the peak of interleaved 1F1B's first rank: ZB-H1's memory bound (max over ranks
//      equal to the interleaved 1F1B schedule's);
//   3. else its oldest pending W (the delayed weight gradients fill what would be bubbles).
// The resulting per-rank orders are the schedule (timing is not part of it). With m a
// multiple of P and F = B = W this reaches ZB-H1's bubble (P−1)/(3·v·m + P−1), a third of
// interleaved 1F1B's (P−1)/(v·m + P−1) up to the denominator (tests check both).
PpSchedule zero_bubble(int ranks, int virtual_stages, int microbatches) {
  check_sizes("zero_bubble", ranks, virtual_stages, microbatches);
  if (virtual_stages < 2)
    SM_INPUT_ERROR("zero_bubble schedule needs --pp-virtual-stages >= 2 (got " << virtual_stages
                   << "): this ZB-H1 runs on the interleaved placement");
  const int stages = ranks * virtual_stages;
  const int limit = 2 * (ranks - 1) + (virtual_stages - 1) * ranks + 1;
  const long kNotYet = -1;
  // End times (integer steps) of F and B per (stage, microbatch); kNotYet until scheduled.
  std::vector<long> forward_end(size_t(stages) * microbatches, kNotYet);
  std::vector<long> backward_end(size_t(stages) * microbatches, kNotYet);
  auto at = [&](int stage, int mb) { return size_t(stage) * microbatches + mb; };
  auto done_by = [&](const std::vector<long>& ends, int stage, int mb, long t) {
    return ends[at(stage, mb)] != kNotYet && ends[at(stage, mb)] <= t;
  };

  struct RankState {
    std::vector<PpAction> forward_order, backward_order;
    size_t next_forward = 0, first_open_backward = 0;
    std::vector<char> backward_started;
    std::deque<PpAction> pending_w;  // B done, W not yet started: oldest first
    int in_flight = 0;               // F started, W not yet started
  };
  std::vector<RankState> state(ranks);
  RankOrder compute(ranks);
  for (int r = 0; r < ranks; ++r) {
    state[r].forward_order = interleaved_order(PpActionKind::F, r, ranks, virtual_stages, microbatches, false);
    state[r].backward_order = interleaved_order(PpActionKind::B, r, ranks, virtual_stages, microbatches, true);
    state[r].backward_started.assign(state[r].backward_order.size(), 0);
  }

  long remaining = 3L * stages * microbatches;
  const long step_limit = 4 * remaining + 4L * ranks + 16;  // far above any real makespan
  for (long t = 0; remaining > 0; ++t) {
    SM_CHECK(t < step_limit, "zero_bubble generator made no progress (P " << ranks << ", v " << virtual_stages
                                                                          << ", m " << microbatches << ")");
    for (int r = 0; r < ranks; ++r) {
      RankState& rs = state[r];
      // 1. the earliest ready B
      bool started = false;
      while (rs.first_open_backward < rs.backward_order.size() && rs.backward_started[rs.first_open_backward])
        ++rs.first_open_backward;
      for (size_t k = rs.first_open_backward; k < rs.backward_order.size() && !started; ++k) {
        if (rs.backward_started[k]) continue;
        const PpAction& b = rs.backward_order[k];
        const bool ready = done_by(forward_end, b.stage, b.microbatch, t) &&
                           (b.stage == stages - 1 || done_by(backward_end, b.stage + 1, b.microbatch, t));
        if (!ready) continue;
        rs.backward_started[k] = 1;
        backward_end[at(b.stage, b.microbatch)] = t + 1;
        rs.pending_w.push_back(act(PpActionKind::W, b.stage, b.microbatch));
        compute[r].push_back(b);
        started = true;
      }
      // 2. the next forward, within the memory bound
      if (!started && rs.next_forward < rs.forward_order.size() && rs.in_flight < limit) {
        const PpAction& f = rs.forward_order[rs.next_forward];
        if (f.stage == 0 || done_by(forward_end, f.stage - 1, f.microbatch, t)) {
          forward_end[at(f.stage, f.microbatch)] = t + 1;
          ++rs.in_flight;
          ++rs.next_forward;
          compute[r].push_back(f);
          started = true;
        }
      }
      // 3. the oldest delayed W (its B ended by t: B started at an earlier step)
      if (!started && !rs.pending_w.empty() &&
          done_by(backward_end, rs.pending_w.front().stage, rs.pending_w.front().microbatch, t)) {
        compute[r].push_back(rs.pending_w.front());
        rs.pending_w.pop_front();
        --rs.in_flight;
        started = true;
      }
      remaining -= started;
    }
  }
  return add_transfers(compute, ranks, virtual_stages, microbatches, "zero_bubble");
}

PpSchedule make_schedule(const std::string& kind, int ranks, int virtual_stages, int microbatches) {
  if (kind == "gpipe" || kind == "1f1b") {
    if (virtual_stages != 1)
      SM_INPUT_ERROR("--pp-schedule " << kind << " needs --pp-virtual-stages 1 (got " << virtual_stages
                                      << "); use interleaved or zero_bubble with virtual stages");
    return kind == "gpipe" ? gpipe(ranks, microbatches) : one_f_one_b(ranks, microbatches);
  }
  if (kind == "interleaved") return interleaved(ranks, virtual_stages, microbatches);
  if (kind == "zero_bubble") return zero_bubble(ranks, virtual_stages, microbatches);
  if (kind == "auto")
    SM_INPUT_ERROR("--pp-schedule auto must be resolved first (auto_schedule: it depends on --pp-delay-wgrad)");
  SM_INPUT_ERROR("--pp-schedule " << kind
                                  << ": unknown schedule (valid: auto, gpipe, 1f1b, interleaved, zero_bubble)");
}

// ---------------------------------------------------------------- text form

std::string to_text(const PpSchedule& schedule) {
  std::string out;
  for (const std::vector<PpAction>& rank : schedule.per_rank) {
    for (size_t k = 0; k < rank.size(); ++k) {
      if (k) out += ' ';
      out += to_text(rank[k]);
    }
    out += '\n';
  }
  return out;
}

namespace {

struct ActionLine {
  int line_number = 0;
  std::vector<std::string> tokens;
};

// Reads "<digits><code><digits>"; false when the token does not have that shape.
bool split_token(const std::string& token, long& stage, std::string& code, long& microbatch) {
  size_t i = 0;
  auto digits = [&](long& value) {
    const size_t begin = i;
    value = 0;
    while (i < token.size() && std::isdigit(static_cast<unsigned char>(token[i]))) {
      if (i - begin >= 9) return false;  // keeps the value far from overflow
      value = value * 10 + (token[i] - '0');
      ++i;
    }
    return i > begin;
  };
  if (!digits(stage)) return false;
  const size_t code_begin = i;
  while (i < token.size() && std::isalpha(static_cast<unsigned char>(token[i]))) ++i;
  code = token.substr(code_begin, i - code_begin);
  if (code.empty()) return false;
  return digits(microbatch) && i == token.size();
}

bool kind_of_code(const std::string& code, PpActionKind& kind) {
  static const PpActionKind kAll[] = {PpActionKind::F,      PpActionKind::B,      PpActionKind::W,
                                      PpActionKind::BW,     PpActionKind::SEND_F, PpActionKind::RECV_F,
                                      PpActionKind::SEND_B, PpActionKind::RECV_B};
  for (PpActionKind k : kAll)
    if (code == pp_action_code(k)) {
      kind = k;
      return true;
    }
  return false;
}

// A parsed schedule and where its largest microbatch first appears (for messages about the
// microbatch count a file implies).
struct ParsedSchedule {
  PpSchedule schedule;
  int max_microbatch_line = 0;
};

ParsedSchedule parse_schedule_text(const std::string& text, int virtual_stages, const std::string& source_name,
                                   int expected_ranks) {
  if (virtual_stages < 1)
    SM_INPUT_ERROR(source_name << ": --pp-virtual-stages must be at least 1 (got " << virtual_stages << ")");
  std::vector<ActionLine> lines;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    ActionLine parsed;
    parsed.line_number = number;
    for (std::string w; words >> w;) parsed.tokens.push_back(w);
    if (parsed.tokens.empty() || parsed.tokens[0][0] == '#') continue;
    lines.push_back(parsed);
  }
  if (lines.empty()) SM_INPUT_ERROR(source_name << ": no actions (expected one line of actions per pipeline rank)");
  // The rank count first: every placement message below assumes one line per rank of the run.
  if (expected_ranks > 0 && int(lines.size()) != expected_ranks) {
    std::string numbers;
    for (size_t k = 0; k < lines.size() && k < 8; ++k)
      numbers += (k ? ", " : "") + std::to_string(lines[k].line_number);
    if (lines.size() > 8) numbers += ", ...";
    SM_INPUT_ERROR(source_name << ": the file has " << lines.size() << (lines.size() == 1 ? " line" : " lines")
                               << " of actions (line" << (lines.size() == 1 ? " " : "s ") << numbers
                               << "; one line per pipeline rank) but the run has pp = " << expected_ranks
                               << " pipeline ranks; write " << expected_ranks << " lines, one per rank");
  }

  ParsedSchedule out;
  PpSchedule& s = out.schedule;
  s.ranks = int(lines.size());
  s.virtual_stages = virtual_stages;
  s.kind = "custom";
  s.per_rank.resize(s.ranks);
  const int stages = s.logical_stages();
  int max_microbatch = -1;
  for (int r = 0; r < s.ranks; ++r) {
    for (const std::string& token : lines[r].tokens) {
      // The token is the file's: quoted printable (a binary byte as \xHH), never raw.
      const std::string where =
          source_name + ":" + std::to_string(lines[r].line_number) + ": action '" + printable_token(token) + "'";
      long stage = 0, microbatch = 0;
      std::string code;
      PpActionKind kind = PpActionKind::F;
      if (!split_token(token, stage, code, microbatch))
        SM_INPUT_ERROR(where << ": expected <stage><F|B|W|BW|SF|RF|SB|RB><microbatch>, e.g. '0F3' or '1BW2'");
      if (!kind_of_code(code, kind))
        SM_INPUT_ERROR(where << ": unknown action '" << printable_token(code)
                             << "' (valid: F, B, W, BW, SF, RF, SB, RB)");
      if (stage >= stages)
        SM_INPUT_ERROR(where << ": stage " << stage << " does not exist (" << s.ranks << " ranks x " << virtual_stages
                             << " virtual stages = " << stages << " logical stages)");
      if (s.rank_of_stage(int(stage)) != r)
        SM_INPUT_ERROR(where << ": stage " << stage << " lives on rank " << s.rank_of_stage(int(stage))
                             << " but this line is rank " << r << " (stage s lives on rank s mod " << s.ranks << ")");
      s.per_rank[r].push_back(act(kind, int(stage), int(microbatch)));
      if (int(microbatch) > max_microbatch) {
        max_microbatch = int(microbatch);
        out.max_microbatch_line = lines[r].line_number;
      }
    }
  }
  s.microbatches = max_microbatch + 1;
  return out;
}

}  // namespace

PpSchedule parse_schedule(const std::string& text, int virtual_stages, const std::string& source_name,
                          int expected_ranks) {
  return parse_schedule_text(text, virtual_stages, source_name, expected_ranks).schedule;
}

// ----------------------------------------------------------- docs/semantics.md §6 rules

std::string auto_schedule(bool delay_wgrad, int virtual_stages) {
  if (delay_wgrad) return "zero_bubble";
  if (virtual_stages > 1) return "interleaved";
  return "1f1b";
}

void check_schedule_choice(const std::string& kind, int virtual_stages, bool delay_wgrad, int microbatches,
                           int logical_stages) {
  const std::string chosen = kind == "auto" ? auto_schedule(delay_wgrad, virtual_stages) : kind;
  const std::string by_auto = kind == "auto" ? " (chosen by --pp-schedule auto)" : "";
  if (chosen != "gpipe" && chosen != "1f1b" && chosen != "interleaved" && chosen != "zero_bubble")
    SM_INPUT_ERROR("--pp-schedule " << kind
                                    << ": unknown schedule (valid: auto, gpipe, 1f1b, interleaved, zero_bubble)");
  if (virtual_stages < 1) SM_INPUT_ERROR("--pp-virtual-stages must be at least 1 (got " << virtual_stages << ")");
  if ((chosen == "gpipe" || chosen == "1f1b") && virtual_stages != 1)
    SM_INPUT_ERROR("--pp-schedule " << chosen << " needs --pp-virtual-stages 1 (got " << virtual_stages
                                    << "); virtual stages need --pp-schedule interleaved or zero_bubble");
  if ((chosen == "interleaved" || chosen == "zero_bubble") && virtual_stages < 2)
    SM_INPUT_ERROR("--pp-schedule " << chosen << by_auto << " needs --pp-virtual-stages 2 or more (got "
                                    << virtual_stages << ")");
  if (chosen == "gpipe" && delay_wgrad)
    SM_INPUT_ERROR("--pp-schedule gpipe refuses --pp-delay-wgrad (delayed weight gradients need zero_bubble)");
  if ((chosen == "1f1b" || chosen == "interleaved") && delay_wgrad)
    SM_INPUT_ERROR("--pp-delay-wgrad with --pp-schedule " << chosen << ": this schedule runs every backward whole "
                   "(input and weight gradient together), so nothing would be delayed; use --pp-schedule "
                   "zero_bubble (or auto)");
  if (microbatches < logical_stages)
    SM_INPUT_ERROR("--pp-microbatches " << microbatches << " is fewer than the " << logical_stages
                                        << " logical pipeline stages (ranks x --pp-virtual-stages); use at least "
                                        << logical_stages);
  const int ranks = logical_stages / virtual_stages;
  if (chosen == "interleaved" && ranks > 0 && microbatches % ranks != 0)
    SM_INPUT_ERROR("--pp-microbatches " << microbatches << " must be a multiple of the " << ranks
                                        << " pipeline ranks for --pp-schedule interleaved" << by_auto);
}

namespace {
// --pp-schedule-file `path` of a pipeline of `ranks` ranks: read through read_text_file (bounded,
// text only: /dev/zero, a FIFO or a binary file is refused naming the file, never echoed) and
// parsed; every message names the file (parse errors also the line).
ParsedSchedule read_schedule_file(const std::string& path, int virtual_stages, int ranks) {
  const std::string text = read_text_file(path, "--pp-schedule-file");
  return parse_schedule_text(text, virtual_stages, path, ranks);
}

// "the file's actions use microbatches 0..99 (100 microbatches; microbatch 99 first on line 3)"
std::string file_microbatches(const ParsedSchedule& p) {
  const int m = p.schedule.microbatches;
  std::ostringstream os;
  os << "the file's actions use microbatch" << (m > 1 ? "es 0.." + std::to_string(m - 1) : std::string(" 0")) << " (" << m
     << " microbatch" << (m > 1 ? "es" : "") << "; microbatch " << m - 1 << " first on line " << p.max_microbatch_line
     << ")";
  return os.str();
}
}  // namespace

int resolve_microbatches(int64_t batch, int ranks, int virtual_stages, int requested, const std::string& kind,
                         bool delay_wgrad, const std::string& schedule_file, PpSchedule* file_schedule) {
  int m = requested;
  if (m <= 0 && !schedule_file.empty()) {
    // The count is the file's, not a flag the user gave: the messages say so.
    const ParsedSchedule p = read_schedule_file(schedule_file, virtual_stages, ranks);
    m = p.schedule.microbatches;
    if (batch % m != 0)
      SM_INPUT_ERROR("--pp-schedule-file " << schedule_file << ": " << file_microbatches(p) << ", but the batch of "
                                           << batch << " samples per replica does not split into " << m
                                           << " equal microbatches; write a schedule whose microbatch count divides "
                                           << batch);
    if (file_schedule) *file_schedule = p.schedule;
    return m;
  }
  if (m <= 0) {
    const std::string chosen = kind == "auto" ? auto_schedule(delay_wgrad, virtual_stages) : kind;
    m = default_microbatches(static_cast<int>(batch), ranks * virtual_stages, chosen == "interleaved" ? ranks : 1);
  }
  if (batch % m != 0)
    SM_INPUT_ERROR("--pp-microbatches " << m << " does not divide the batch of " << batch << " samples per replica");
  return m;
}

PpSchedule resolve_schedule(const std::string& kind, const std::string& schedule_file, int ranks, int virtual_stages,
                            bool delay_wgrad, int microbatches) {
  if (schedule_file.empty()) {
    SM_CHECK(microbatches > 0, "pipeline schedule without a resolved microbatch count");
    const std::string chosen = kind == "auto" ? auto_schedule(delay_wgrad, virtual_stages) : kind;
    check_schedule_choice(chosen, virtual_stages, delay_wgrad, microbatches, ranks * virtual_stages);
    return make_schedule(chosen, ranks, virtual_stages, microbatches);
  }
  const ParsedSchedule p = read_schedule_file(schedule_file, virtual_stages, ranks);
  // `microbatches` > 0 is --pp-microbatches as given, or the count resolve_microbatches took
  // from this file (then equal, unless the file changed in between).
  if (microbatches > 0 && p.schedule.microbatches != microbatches)
    SM_INPUT_ERROR("--pp-schedule-file " << schedule_file << ": " << file_microbatches(p) << ", but the run has "
                                         << microbatches << " microbatches per step (--pp-microbatches)");
  return p.schedule;
}

int default_microbatches(int batch, int stages, int multiple_of) {
  if (batch < 1 || stages < 1 || multiple_of < 1)
    SM_INPUT_ERROR("--pp-microbatches: cannot choose a default for batch size " << batch << " and " << stages
                                                                               << " pipeline stages");
  const int high = std::min(batch, 4 * stages);
  for (int m = high; m >= stages; --m)
    if (batch % m == 0 && m % multiple_of == 0) return m;
  const std::string multiple = multiple_of > 1 ? " that is a multiple of " + std::to_string(multiple_of) +
                                                     " (the interleaved schedule's rounds of one microbatch per rank)"
                                               : "";
  SM_INPUT_ERROR("--pp-microbatches: no divisor of the batch size " << batch << multiple << " lies in [" << stages
                                                                     << ", " << high
                                                                     << "] (at least one microbatch per logical "
                                                                        "stage); pass --pp-microbatches or change "
                                                                        "--batch-size");
}

}  // namespace sm
