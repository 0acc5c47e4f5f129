// pp_simulator.cpp — validating, timing and drawing pipeline schedules (pp_simulator.h).
// Every action is found through an index keyed by (kind, stage, microbatch); validation runs
// in three passes (shape, counts, in-order execution) and stops after the first pass that
// found errors, so later passes may assume the earlier ones hold.
#include "spikemesh/parallel/pipeline/pp_simulator.h"

#include <algorithm>
#include <cstdio>

#include "spikemesh/core/error.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"

namespace sm {

PpCosts PpCosts::uniform(int logical_stages, double f, double b, double w, double comm) {
  PpCosts c;
  c.f.assign(size_t(std::max(logical_stages, 0)), f);
  c.b.assign(c.f.size(), b);
  c.w.assign(c.f.size(), w);
  c.comm = comm;
  return c;
}

std::string PpValidation::message() const {
  std::string out;
  for (const std::string& e : errors) out += (out.empty() ? "" : "\n") + e;
  return out;
}

namespace {

constexpr int kKinds = 8;
constexpr size_t kMaxErrors = 20;

// Where each (kind, stage, microbatch) occurs: how many times, and its first rank/position.
class ActionIndex {
 public:
  ActionIndex(const PpSchedule& s)
      : stages_(s.logical_stages()), microbatches_(s.microbatches),
        slots_(size_t(kKinds) * stages_ * microbatches_) {}
  size_t key(PpActionKind kind, int stage, int mb) const {
    return (size_t(kind) * stages_ + stage) * microbatches_ + mb;
  }
  size_t key(const PpAction& a) const { return key(a.kind, a.stage, a.microbatch); }
  size_t size() const { return slots_.size(); }
  struct Slot {
    int count = 0, rank = -1, position = -1;
  };
  Slot& operator[](size_t k) { return slots_[k]; }
  int count(PpActionKind kind, int stage, int mb) const { return slots_[key(kind, stage, mb)].count; }

 private:
  int stages_, microbatches_;
  std::vector<Slot> slots_;
};

std::string quoted(PpActionKind kind, int stage, int mb) { return "'" + to_text(PpAction{kind, stage, mb}) + "'"; }
std::string quoted(const PpAction& a) { return "'" + to_text(a) + "'"; }

class ErrorList {
 public:
  explicit ErrorList(PpValidation& v) : v_(v) {}
  void add(const std::string& e) {
    ++total_;
    if (v_.errors.size() < kMaxErrors) v_.errors.push_back(e);
  }
  void finish() {
    if (total_ > v_.errors.size())
      v_.errors.push_back("... and " + std::to_string(total_ - v_.errors.size()) + " more errors");
  }
  bool any() const { return total_ > 0; }

 private:
  PpValidation& v_;
  size_t total_ = 0;
};

std::string rank_tag(int r) { return "rank " + std::to_string(r) + ": "; }

// The stage a transfer's partner action lives at, or −1 when the transfer is not needed
// (partner stage missing or on the same rank).
int partner_stage(const PpSchedule& s, const PpAction& a) {
  int other = -1;
  switch (a.kind) {
    case PpActionKind::SEND_F: other = a.stage + 1; break;
    case PpActionKind::RECV_F: other = a.stage - 1; break;
    case PpActionKind::SEND_B: other = a.stage - 1; break;
    case PpActionKind::RECV_B: other = a.stage + 1; break;
    default: return -1;
  }
  if (other < 0 || other >= s.logical_stages() || s.rank_of_stage(other) == s.rank_of_stage(a.stage)) return -1;
  return other;
}

// The SEND a RECV waits for.
PpAction matching_send(const PpAction& recv) {
  if (recv.kind == PpActionKind::RECV_F) return PpAction{PpActionKind::SEND_F, recv.stage - 1, recv.microbatch};
  return PpAction{PpActionKind::SEND_B, recv.stage + 1, recv.microbatch};
}

bool check_shape(const PpSchedule& s, ActionIndex& index, ErrorList& errors) {
  const int stages = s.logical_stages();
  for (int r = 0; r < s.ranks; ++r) {
    for (size_t k = 0; k < s.per_rank[r].size(); ++k) {
      const PpAction& a = s.per_rank[r][k];
      const std::string tag = rank_tag(r) + "action " + quoted(a) + " ";
      if (a.stage < 0 || a.stage >= stages) {
        errors.add(tag + "names stage " + std::to_string(a.stage) + ", which does not exist (" +
                   std::to_string(stages) + " logical stages)");
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= s.microbatches) {
        errors.add(tag + "names microbatch " + std::to_string(a.microbatch) + ", outside 0.." +
                   std::to_string(s.microbatches - 1));
        continue;
      }
      if (s.rank_of_stage(a.stage) != r) {
        errors.add(tag + "is on the wrong rank: stage " + std::to_string(a.stage) + " lives on rank " +
                   std::to_string(s.rank_of_stage(a.stage)));
        continue;
      }
      if (!is_compute(a.kind) && partner_stage(s, a) < 0) {
        errors.add(tag + "is a transfer that is not needed (no neighbouring stage on another rank)");
        continue;
      }
      ActionIndex::Slot& slot = index[index.key(a)];
      if (slot.count > 0)
        errors.add(tag + "is duplicated (positions " + std::to_string(slot.position) + " and " +
                   std::to_string(k) + ")");
      else
        slot.rank = r, slot.position = int(k);
      ++slot.count;
    }
  }
  return !errors.any();
}

// One transfer boundary: the sender's and receiver's actions must both be there.
void check_pair(const PpSchedule& s, const ActionIndex& index, const PpAction& send, const PpAction& recv,
                ErrorList& errors) {
  const bool has_send = index.count(send.kind, send.stage, send.microbatch) > 0;
  const bool has_recv = index.count(recv.kind, recv.stage, recv.microbatch) > 0;
  const int send_rank = s.rank_of_stage(send.stage), recv_rank = s.rank_of_stage(recv.stage);
  if (!has_send && !has_recv)
    errors.add(rank_tag(send_rank) + "missing send " + quoted(send) + " and rank " + std::to_string(recv_rank) +
               " missing receive " + quoted(recv));
  else if (!has_recv)
    errors.add(rank_tag(recv_rank) + "missing receive " + quoted(recv) + " for the send " + quoted(send) +
               " on rank " + std::to_string(send_rank));
  else if (!has_send)
    errors.add(rank_tag(send_rank) + "missing send " + quoted(send) + " for the receive " + quoted(recv) +
               " on rank " + std::to_string(recv_rank));
}

bool check_counts(const PpSchedule& s, const ActionIndex& index, ErrorList& errors) {
  const int stages = s.logical_stages();
  using K = PpActionKind;
  for (int st = 0; st < stages; ++st) {
    const std::string tag = rank_tag(s.rank_of_stage(st));
    for (int mb = 0; mb < s.microbatches; ++mb) {
      if (index.count(K::F, st, mb) == 0) errors.add(tag + "missing forward " + quoted(K::F, st, mb));
      const bool bw = index.count(K::BW, st, mb) > 0, b = index.count(K::B, st, mb) > 0,
                 w = index.count(K::W, st, mb) > 0;
      if (bw && (b || w))
        errors.add(tag + "both the full backward " + quoted(K::BW, st, mb) + " and the split " +
                   quoted(b ? K::B : K::W, st, mb));
      else if (!bw && !b && !w)
        errors.add(tag + "missing backward: neither " + quoted(K::BW, st, mb) + " nor " + quoted(K::B, st, mb) +
                   " + " + quoted(K::W, st, mb));
      else if (b && !w)
        errors.add(tag + quoted(K::B, st, mb) + " has no weight-gradient pass " + quoted(K::W, st, mb));
      else if (w && !b)
        errors.add(tag + quoted(K::W, st, mb) + " has no input-gradient pass " + quoted(K::B, st, mb));
      if (st + 1 < stages && s.rank_of_stage(st + 1) != s.rank_of_stage(st)) {
        check_pair(s, index, PpAction{K::SEND_F, st, mb}, PpAction{K::RECV_F, st + 1, mb}, errors);
        check_pair(s, index, PpAction{K::SEND_B, st + 1, mb}, PpAction{K::RECV_B, st, mb}, errors);
      }
    }
  }
  return !errors.any();
}

// Whether the inputs of a compute or send action already ran on its own rank: "" when they
// did, else the error naming the action and the input it runs before.
std::string missing_input(const PpSchedule& s, const ActionIndex& index, const std::vector<char>& done,
                          const PpAction& a) {
  using K = PpActionKind;
  const int r = s.rank_of_stage(a.stage), last = s.logical_stages() - 1, mb = a.microbatch;
  auto ran = [&](K kind, int stage) { return done[index.key(kind, stage, mb)] != 0; };
  auto backward_ran = [&](int stage) { return ran(K::B, stage) || ran(K::BW, stage); };
  auto backward_name = [&](int stage) { return quoted(index.count(K::BW, stage, mb) ? K::BW : K::B, stage, mb); };
  const std::string tag = rank_tag(r) + quoted(a) + " runs before ";
  switch (a.kind) {
    case K::F:
      // A stage's forwards run in microbatch order: batch-norm running statistics are a moving
      // average in that order, as on one rank accumulating the same microbatches.
      if (mb > 0 && done[index.key(K::F, a.stage, mb - 1)] == 0)
        return tag + "the forward of the microbatch before it, " + quoted(K::F, a.stage, mb - 1) +
               " (a stage's forwards run in microbatch order: batch-norm running statistics depend on it)";
      if (a.stage == 0) return "";
      if (s.rank_of_stage(a.stage - 1) == r)
        return ran(K::F, a.stage - 1) ? "" : tag + "the previous stage's forward " + quoted(K::F, a.stage - 1, mb);
      return ran(K::RECV_F, a.stage) ? "" : tag + "its receive " + quoted(K::RECV_F, a.stage, mb);
    case K::B:
    case K::BW:
      if (!ran(K::F, a.stage)) return tag + "its forward " + quoted(K::F, a.stage, mb);
      if (a.stage == last) return "";
      if (s.rank_of_stage(a.stage + 1) == r)
        return backward_ran(a.stage + 1) ? "" : tag + "the next stage's backward " + backward_name(a.stage + 1);
      return ran(K::RECV_B, a.stage) ? "" : tag + "its receive " + quoted(K::RECV_B, a.stage, mb);
    case K::W: return ran(K::B, a.stage) ? "" : tag + "its input-gradient pass " + quoted(K::B, a.stage, mb);
    case K::SEND_F: return ran(K::F, a.stage) ? "" : tag + "the forward it sends, " + quoted(K::F, a.stage, mb);
    case K::SEND_B: return backward_ran(a.stage) ? "" : tag + "the backward it sends, " + backward_name(a.stage);
    default: return "";
  }
}

void check_execution(const PpSchedule& s, const ActionIndex& index, ErrorList& errors) {
  std::vector<char> done(index.size(), 0);
  std::vector<size_t> next(s.ranks, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.ranks; ++r) {
      const std::vector<PpAction>& actions = s.per_rank[r];
      while (next[r] < actions.size()) {
        const PpAction& a = actions[next[r]];
        if (a.kind == PpActionKind::RECV_F || a.kind == PpActionKind::RECV_B) {
          if (!done[index.key(matching_send(a))]) break;  // blocks: another rank must send first
        } else {
          const std::string missing = missing_input(s, index, done, a);
          if (!missing.empty()) {
            errors.add(missing);
            return;
          }
        }
        done[index.key(a)] = 1;
        ++next[r];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < s.ranks; ++r) {
    if (next[r] == s.per_rank[r].size()) continue;
    const PpAction& a = s.per_rank[r][next[r]];
    const PpAction send = matching_send(a);
    stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits at " + quoted(a) +
             " for " + quoted(send) + " on rank " + std::to_string(s.rank_of_stage(send.stage));
  }
  if (!stuck.empty()) errors.add("deadlock, no rank can progress: " + stuck);
}

}  // namespace

PpValidation validate_schedule(const PpSchedule& s) {
  PpValidation v;
  ErrorList errors(v);
  if (s.ranks < 1 || s.virtual_stages < 1 || s.microbatches < 1 || int(s.per_rank.size()) != s.ranks) {
    errors.add("schedule shape: ranks " + std::to_string(s.ranks) + ", virtual stages " +
               std::to_string(s.virtual_stages) + ", microbatches " + std::to_string(s.microbatches) + ", " +
               std::to_string(s.per_rank.size()) + " action lists (need all >= 1 and one list per rank)");
    return v;
  }
  // Every (stage, microbatch) needs its own forward: with fewer actions than that the schedule
  // is incomplete, and sizing the index by the largest microbatch named (e.g. "0F99999999")
  // would cost memory and time out of all proportion to the schedule.
  size_t actions = 0;
  for (const std::vector<PpAction>& r : s.per_rank) actions += r.size();
  if (int64_t(s.logical_stages()) * s.microbatches > int64_t(actions)) {
    errors.add("schedule shape: " + std::to_string(actions) + " actions cannot hold a forward for each of the " +
               std::to_string(s.logical_stages()) + " logical stages x " + std::to_string(s.microbatches) +
               " microbatches (microbatches are 0.." + std::to_string(s.microbatches - 1) + ")");
    return v;
  }
  ActionIndex index(s);
  if (check_shape(s, index, errors) && check_counts(s, index, errors)) check_execution(s, index, errors);
  errors.finish();
  return v;
}

void require_valid_schedule(const PpSchedule& schedule, const std::string& what) {
  const PpValidation v = validate_schedule(schedule);
  if (!v.ok()) SM_INPUT_ERROR(what << ": invalid pipeline schedule:\n" << v.message());
}

PpSimulation simulate(const PpSchedule& s, const PpCosts& costs) {
  const size_t stages = size_t(s.logical_stages());
  if (costs.f.size() != stages || costs.b.size() != stages || costs.w.size() != stages)
    SM_INPUT_ERROR("pipeline costs: need one f, b and w per logical stage (" << stages << "); got " << costs.f.size()
                                                                             << ", " << costs.b.size() << ", "
                                                                             << costs.w.size());
  for (size_t i = 0; i < stages; ++i)
    if (costs.f[i] < 0 || costs.b[i] < 0 || costs.w[i] < 0)
      SM_INPUT_ERROR("pipeline costs: stage " << i << " has a negative cost");
  if (costs.comm < 0) SM_INPUT_ERROR("pipeline costs: negative transfer cost " << costs.comm);
  require_valid_schedule(s, "simulate " + s.kind);

  ActionIndex index(s);
  std::vector<double> send_start(index.size(), -1.0);
  PpSimulation sim;
  sim.ranks = s.ranks;
  sim.per_rank.resize(s.ranks);
  sim.busy.assign(s.ranks, 0.0);
  std::vector<double> clock(s.ranks, 0.0);
  std::vector<size_t> next(s.ranks, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.ranks; ++r) {
      for (; next[r] < s.per_rank[r].size(); ++next[r]) {
        const PpAction& a = s.per_rank[r][next[r]];
        const bool is_recv = a.kind == PpActionKind::RECV_F || a.kind == PpActionKind::RECV_B;
        if (is_recv && send_start[index.key(matching_send(a))] < 0) break;  // let the sender advance
        double start = clock[r], duration = costs.comm;
        switch (a.kind) {
          case PpActionKind::F: duration = costs.f[a.stage]; break;
          case PpActionKind::B: duration = costs.b[a.stage]; break;
          case PpActionKind::W: duration = costs.w[a.stage]; break;
          case PpActionKind::BW: duration = costs.b[a.stage] + costs.w[a.stage]; break;
          case PpActionKind::SEND_F:
          case PpActionKind::SEND_B: send_start[index.key(a)] = start; break;
          case PpActionKind::RECV_F:
          case PpActionKind::RECV_B: start = std::max(start, send_start[index.key(matching_send(a))]); break;
        }
        sim.per_rank[r].push_back(PpTimedAction{a, start, start + duration});
        clock[r] = start + duration;
        if (is_compute(a.kind)) sim.busy[r] += duration;
        progress = true;
      }
    }
  }
  for (int r = 0; r < s.ranks; ++r) {
    SM_CHECK(next[r] == s.per_rank[r].size(), "simulation of a validated schedule stopped on rank " << r);
    sim.makespan = std::max(sim.makespan, clock[r]);
  }
  double total_busy = 0;
  for (int r = 0; r < s.ranks; ++r) {
    total_busy += sim.busy[r];
    sim.bubble.push_back(sim.makespan > 0 ? 1.0 - sim.busy[r] / sim.makespan : 0.0);
    int live = 0, peak_live = 0, pending = 0, peak_pending = 0;
    for (const PpAction& a : s.per_rank[r]) {
      if (a.kind == PpActionKind::F) peak_live = std::max(peak_live, ++live);
      if (a.kind == PpActionKind::B || a.kind == PpActionKind::BW) --live;
      if (a.kind == PpActionKind::B) peak_pending = std::max(peak_pending, ++pending);
      if (a.kind == PpActionKind::W) --pending;
    }
    sim.peak_live_activations.push_back(peak_live);
    sim.peak_pending_wgrads.push_back(peak_pending);
  }
  sim.bubble_fraction = sim.makespan > 0 ? 1.0 - total_busy / (s.ranks * sim.makespan) : 0.0;
  return sim;
}

std::string ascii_timeline(const PpSimulation& sim, int columns) {
  if (columns < 1) SM_INPUT_ERROR("pipeline timeline: need at least one column (got " << columns << ")");
  const std::string widest = "rank " + std::to_string(std::max(sim.ranks - 1, 0));
  std::string out;
  for (int r = 0; r < sim.ranks; ++r) {
    std::string label = "rank " + std::to_string(r);
    label.resize(widest.size(), ' ');
    std::string row(size_t(columns), '.');
    const std::vector<PpTimedAction>& actions = sim.per_rank[r];
    size_t k = 0;
    for (int c = 0; c < columns && sim.makespan > 0; ++c) {
      const double t = (c + 0.5) * sim.makespan / columns;
      while (k < actions.size() && actions[k].end <= t) ++k;  // actions are in time order
      if (k == actions.size() || actions[k].start > t) continue;
      switch (actions[k].action.kind) {
        case PpActionKind::F: row[c] = 'F'; break;
        case PpActionKind::B:
        case PpActionKind::BW: row[c] = 'B'; break;
        case PpActionKind::W: row[c] = 'W'; break;
        default: row[c] = '~'; break;
      }
    }
    out += label + " |" + row + "|\n";
  }
  return out;
}

PpCosts stage_costs_of(const std::vector<double>& unit_costs, const std::vector<int>& layout) {
  PpCosts c;
  for (double x : stage_costs(unit_costs, layout)) {
    c.f.push_back(x / 3);
    c.b.push_back(x / 3);
    c.w.push_back(x / 3);
  }
  return c;
}

std::vector<int> simulated_best_partition(const std::vector<double>& unit_costs, const PpSchedule& schedule) {
  require_valid_schedule(schedule, "pipeline schedule");
  return best_partition(unit_costs, schedule.logical_stages(), [&](const std::vector<int>& layout) {
    return simulate(schedule, stage_costs_of(unit_costs, layout)).makespan;
  });
}

}  // namespace sm
