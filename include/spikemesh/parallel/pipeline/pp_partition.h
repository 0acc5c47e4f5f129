// pp_partition.h — splitting a model's units into contiguous pipeline stages
// (docs/architecture.md §7 "PP", docs/semantics.md §6): given by the user as `--pp-layout
// "1|2|2|1"` (units per logical stage), or balanced by measured per-unit costs — the contiguous
// partition minimising the largest stage cost, found by binary search on that limit with a greedy
// fill; best_partition picks among all splits by a score (the runtime: its schedule's simulated
// makespan). Pure: no MPI. Invariants of every partition returned: one entry per logical stage,
// every entry >= 1 (a stage without units is refused), entries sum to the number of units.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sm {

// Units per logical stage parsed from --pp-layout ("1|2|2|1"; blanks allowed around numbers).
// Input errors name the flag and the value: a non-integer or negative entry, an empty stage
// (0), the wrong number of entries for `stages`, a sum different from `units`.
std::vector<int> parse_pp_layout(const std::string& text, int stages, int units);

// The contiguous partition of `costs` (one per unit, >= 0) into `stages` non-empty parts
// whose largest part-sum is smallest (ties: earlier stages take as many units as they can).
// Input error when stages > units ("more stages than units") or stages < 1.
std::vector<int> balanced_partition(const std::vector<double>& costs, int stages);

// The split the caller's `score` (lower is better; a runtime passes the simulated makespan
// of its schedule with these costs) likes best: every contiguous split into `stages`
// non-empty parts is scored when there are at most `max_candidates` (simulating one
// schedule is ~0.1–1 ms: at most a second or two at start-up), otherwise only
// balanced_partition's answer is used. Ties: the smaller largest stage, then the earlier
// split. balanced_partition is always a candidate, so the result never scores worse.
// Why not the largest stage alone: with virtual stages a rank runs several stages, and the
// interleaved and zero-bubble schedules need every chunk of every rank about equal — a
// largest-stage split can leave one rank far busier, a per-rank-sum split can leave chunks
// nearly empty; the schedule's own simulated makespan weighs both.
std::vector<int> best_partition(const std::vector<double>& costs, int stages,
                                const std::function<double(const std::vector<int>&)>& score,
                                int64_t max_candidates = 2000);

// Sum of the costs of each stage of `layout` (units per stage, in order).
std::vector<double> stage_costs(const std::vector<double>& costs, const std::vector<int>& layout);

// "1|2|2|1"
std::string layout_text(const std::vector<int>& layout);

}  // namespace sm
