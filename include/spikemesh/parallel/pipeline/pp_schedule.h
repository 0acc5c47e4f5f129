// pp_schedule.h — pipeline-parallel schedules as data (docs/architecture.md §7 "PP",
// docs/semantics.md §6 schedule rules): per rank, the ordered list of actions a runtime executes,
// produced by one generator per kind (gpipe, 1f1b, interleaved, zero_bubble), printed and parsed in
// a compact text form, and checked by pp_simulator.h. No MPI, no tensors; the resolve_* functions
// read a --pp-schedule-file.
//
// Placement: P ranks, v virtual stages per rank, S = P·v LOGICAL stages 0..S−1 (the model's
// contiguous stages in forward order). Logical stage s lives on rank s mod P, so rank r holds
// stages r, r + P, ..., r + P·(v−1) (interleaved placement; v = 1 is the plain pipeline).
//
// Actions (PpAction::stage is always the LOGICAL stage of the action):
//   F  forward of (stage, microbatch); BW full backward (input and weight gradients together);
//   B  input-gradient half of the backward, W its weight-gradient half (zero-bubble split);
//   SEND_F/RECV_F move the activation of microbatch i from stage s to s+1: SEND_F carries the
//   SENDER's stage s, RECV_F the RECEIVER's stage s+1; SEND_B/RECV_B move the gradient from
//   stage s+1 to s: SEND_B carries the sender's stage s+1, RECV_B the receiver's stage s.
// A message is identified by (direction, stage pair, microbatch) — what a runtime uses as the
// MPI tag — so a SEND matches exactly one RECV whatever the order of other messages.
// Transfers exist only between stages on different ranks (with P = 1 there are none).
//
// Invariants of every generated schedule (pp_simulator.h's validate_schedule checks them for
// any schedule): each (stage, microbatch) has one F and one backward (BW, or B then W) on the
// stage's rank; a RECV_F sits right before the F that consumes it and a SEND_F right after the
// F that produced it (likewise RECV_B before, SEND_B after the B/BW); sends are buffered (never
// block), receives block until the matching send has run; the schedule is deadlock-free.
//
// Text form: one line per rank, actions separated by spaces, each <stage><code><microbatch>
// with code F, B, W, BW, SF, RF, SB, RB: "0F0 0SF0 0F1 0SF1 0RB0 0BW0 ...". Blank lines and
// lines starting with '#' are skipped when parsing.
#pragma once
#include <string>
#include <vector>

namespace sm {

// BW: full backward (input and weight gradients together).
enum class PpActionKind { F, B, W, BW, SEND_F, RECV_F, SEND_B, RECV_B };

struct PpAction {
  PpActionKind kind = PpActionKind::F;
  int stage = 0;       // logical stage 0..P·v−1 (see the header comment for transfers)
  int microbatch = 0;
  bool operator==(const PpAction& o) const {
    return kind == o.kind && stage == o.stage && microbatch == o.microbatch;
  }
  bool operator!=(const PpAction& o) const { return !(*this == o); }
};

// "F", "B", "W", "BW", "SF", "RF", "SB", "RB".
const char* pp_action_code(PpActionKind kind);
// F, B, W and BW (the actions that cost compute time); the rest are transfers.
bool is_compute(PpActionKind kind);
// "0F3", "1BW2", "0SF1", ...
std::string to_text(const PpAction& action);

struct PpSchedule {
  int ranks = 0;
  int virtual_stages = 1;
  int microbatches = 0;
  std::vector<std::vector<PpAction>> per_rank;  // per_rank[r]: rank r's actions in order
  std::string kind;                             // "gpipe", "1f1b", ..., "custom" when parsed
  int logical_stages() const { return ranks * virtual_stages; }
  int rank_of_stage(int stage) const { return stage % ranks; }
};

// GPipe (v = 1): every rank runs all forwards 0..m−1, then all full backwards 0..m−1.
PpSchedule gpipe(int ranks, int microbatches);
// 1F1B (v = 1, PipeDream-flush): rank r runs min(P−r−1, m) warm-up forwards, then alternates
// F(next), BW(oldest) until the forwards run out, then the remaining BWs.
PpSchedule one_f_one_b(int ranks, int microbatches);
// Megatron's interleaved 1F1B (v ≥ 2; m a multiple of P): see the .cpp for the exact order.
PpSchedule interleaved(int ranks, int virtual_stages, int microbatches);
// ZB-H1 on the interleaved placement (v ≥ 2): backward split into B and W, W delayed to fill
// bubbles, memory bounded by interleaved 1F1B's; see the .cpp for the exact construction.
PpSchedule zero_bubble(int ranks, int virtual_stages, int microbatches);
// Dispatch on a --pp-schedule name other than auto: gpipe and 1f1b require virtual_stages 1.
PpSchedule make_schedule(const std::string& kind, int ranks, int virtual_stages, int microbatches);

// One line per rank, '\n'-terminated.
std::string to_text(const PpSchedule& schedule);
// Inverse of to_text: ranks = number of action lines, microbatches = largest microbatch + 1,
// kind "custom". Syntax and placement errors (a stage that does not exist or lives on another
// rank) throw input errors "<source_name>:<line>: action '<text>': <why>", the token made
// printable (core/text_file.h printable_token). `expected_ranks` > 0: a line count other than
// that is refused first, naming both counts (the run's pp).
PpSchedule parse_schedule(const std::string& text, int virtual_stages, const std::string& source_name,
                          int expected_ranks = 0);

// Spec §4 rules for the flags --pp-schedule, --pp-virtual-stages, --pp-delay-wgrad,
// --pp-microbatches.
// auto → zero_bubble if delayed wgrad, interleaved if virtual stages > 1, else 1f1b.
std::string auto_schedule(bool delay_wgrad, int virtual_stages);
// Throws an input error naming the flags when the combination is not allowed: unknown kind;
// gpipe and 1f1b need v = 1; interleaved and zero_bubble need v ≥ 2; gpipe refuses delayed
// wgrad, and so do 1f1b and interleaved (whole backwards: it would be ignored); microbatches ≥
// logical stages; interleaved needs microbatches a multiple of the ranks
// (logical_stages / v). "auto" is resolved with auto_schedule first.
void check_schedule_choice(const std::string& kind, int virtual_stages, bool delay_wgrad, int microbatches,
                           int logical_stages);
// The largest divisor of `batch` in [stages, min(batch, 4·stages)] (stages: logical stages)
// that is a multiple of `multiple_of`; an input error naming --pp-microbatches when there is none.
int default_microbatches(int batch, int stages, int multiple_of = 1);

// The microbatches per step of a pipeline of `ranks` x `virtual_stages` over `batch` samples
// per replica: `requested` (> 0), else the count the schedule file (if any) runs, else
// default_microbatches (a multiple of the ranks when `kind`, "auto" resolved, is interleaved);
// an input error when it does not divide the batch, naming --pp-microbatches when the count
// came from that flag or the default, and the file (its microbatch range and line) when it
// came from the file. A schedule file is read with read_text_file (bounded, text only) and
// must have `ranks` lines. When the count came from the file, `file_schedule` (if given)
// receives the schedule it holds, so that the file is read once.
int resolve_microbatches(int64_t batch, int ranks, int virtual_stages, int requested, const std::string& kind,
                         bool delay_wgrad, const std::string& schedule_file, PpSchedule* file_schedule = nullptr);
// The schedule a pipeline runs: parsed from `schedule_file` (read_text_file: bounded, text
// only; its line count must be `ranks`, checked before any placement; its microbatch count
// `microbatches` when > 0), or generated by `kind` ("auto" resolved) after
// check_schedule_choice. Input errors name the file (and line) or the flag.
PpSchedule resolve_schedule(const std::string& kind, const std::string& schedule_file, int ranks, int virtual_stages,
                            bool delay_wgrad, int microbatches);

}  // namespace sm
