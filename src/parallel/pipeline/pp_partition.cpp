// pp_partition.cpp — --pp-layout parsing and the cost-balanced contiguous partition
// (pp_partition.h).
#include "spikemesh/parallel/pipeline/pp_partition.h"

#include <algorithm>
#include <functional>
#include <cstdint>
#include <cctype>
#include <numeric>
#include <sstream>

#include "spikemesh/core/error.h"

namespace sm {

std::vector<int> parse_pp_layout(const std::string& text, int stages, int units) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, '|')) {
    size_t a = 0, b = item.size();
    while (a < b && std::isspace(static_cast<unsigned char>(item[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(item[b - 1]))) --b;
    const std::string t = item.substr(a, b - a);
    const bool digits = !t.empty() && std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!digits)
      SM_INPUT_ERROR("--pp-layout \"" << text << "\": entry " << out.size() + 1 << " '" << t
                                       << "' is not a non-negative integer (units per stage, e.g. \"1|2|2|1\")");
    if (t.size() > 6) SM_INPUT_ERROR("--pp-layout \"" << text << "\": entry " << out.size() + 1 << " is too large");
    out.push_back(std::stoi(t));
  }
  if (!text.empty() && text.back() == '|') out.push_back(-1);  // "1|2|": an empty last entry
  if (out.size() != static_cast<size_t>(stages))
    SM_INPUT_ERROR("--pp-layout \"" << text << "\" has " << out.size() << " entries, but the pipeline has " << stages
                                     << " logical stages (pp x --pp-virtual-stages): one entry per stage");
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0)
      SM_INPUT_ERROR("--pp-layout \"" << text << "\": entry " << i + 1 << " is empty (units per stage, e.g. \"1|2|2|1\")");
    if (out[i] == 0) SM_INPUT_ERROR("--pp-layout \"" << text << "\": stage " << i << " has no units");
  }
  const int sum = std::accumulate(out.begin(), out.end(), 0);
  if (sum != units)
    SM_INPUT_ERROR("--pp-layout \"" << text << "\" places " << sum << " units, but the model has " << units);
  return out;
}

namespace {
// Greedy fill under `limit`: the fewest stages whose sums stay <= limit (every unit alone
// must fit); returns the stage count, or INT_MAX when a single unit exceeds the limit.
int stages_needed(const std::vector<double>& costs, double limit) {
  int n = 1;
  double acc = 0;
  for (double c : costs) {
    if (c > limit) return INT32_MAX;
    if (acc + c > limit) {
      ++n;
      acc = 0;
    }
    acc += c;
  }
  return n;
}
}  // namespace

std::vector<int> balanced_partition(const std::vector<double>& costs, int stages) {
  const int units = static_cast<int>(costs.size());
  if (stages < 1) SM_INPUT_ERROR("pipeline stages must be >= 1, got " << stages);
  if (stages > units)
    SM_INPUT_ERROR("more stages than units: " << stages << " logical stages for a model of " << units
                                               << " units (each stage needs at least one)");
  for (double c : costs)
    if (!(c >= 0)) SM_INPUT_ERROR("unit cost " << c << " is not a non-negative number");
  // Binary search on the largest stage cost: the smallest limit the greedy fill meets with
  // <= stages parts (monotone in the limit).
  double lo = *std::max_element(costs.begin(), costs.end());
  double hi = std::accumulate(costs.begin(), costs.end(), 0.0);
  for (int it = 0; it < 100 && hi - lo > 1e-12 * std::max(1.0, hi); ++it) {
    const double mid = 0.5 * (lo + hi);
    if (stages_needed(costs, mid) <= stages) hi = mid;
    else lo = mid;
  }
  // Greedy fill under hi, then split the last parts so that there are exactly `stages`,
  // every one non-empty: a stage keeps taking units while the rest can still fill the others.
  std::vector<int> out;
  int u = 0;
  for (int s = 0; s < stages; ++s) {
    const int must_leave = stages - s - 1;  // one unit at least for every later stage
    double acc = 0;
    int take = 0;
    while (u + take < units - must_leave && (take == 0 || acc + costs[u + take] <= hi * (1 + 1e-12))) {
      acc += costs[u + take];
      ++take;
    }
    if (s == stages - 1) take = units - u;  // the last stage takes the rest (fits by construction)
    out.push_back(take);
    u += take;
  }
  return out;
}

std::vector<int> best_partition(const std::vector<double>& costs, int stages,
                                const std::function<double(const std::vector<int>&)>& score, int64_t max_candidates) {
  const std::vector<int> balanced = balanced_partition(costs, stages);  // validates the arguments too
  const int units = static_cast<int>(costs.size());
  // C(units - 1, stages - 1) splits, counted with a cap
  double count = 1;
  for (int k = 1; k <= stages - 1 && count <= static_cast<double>(max_candidates); ++k)
    count = count * (units - stages + k) / k;
  if (count > static_cast<double>(max_candidates)) return balanced;
  std::vector<int> best = balanced, cur;
  auto largest = [&](const std::vector<int>& l) {
    const std::vector<double> sc = stage_costs(costs, l);
    return *std::max_element(sc.begin(), sc.end());
  };
  double best_score = score(balanced), best_largest = largest(balanced);
  std::function<void(int)> rec = [&](int u) {  // units [u, units) into the remaining stages
    const int left = stages - static_cast<int>(cur.size());
    if (left == 1) {
      cur.push_back(units - u);
      const double sc = score(cur), lg = largest(cur);
      if (sc < best_score * (1 - 1e-9) || (sc <= best_score * (1 + 1e-9) && lg < best_largest)) {
        best = cur;
        best_score = sc;
        best_largest = lg;
      }
      cur.pop_back();
      return;
    }
    for (int take = 1; u + take <= units - (left - 1); ++take) {
      cur.push_back(take);
      rec(u + take);
      cur.pop_back();
    }
  };
  rec(0);
  return best;
}

std::vector<double> stage_costs(const std::vector<double>& costs, const std::vector<int>& layout) {
  std::vector<double> out;
  size_t u = 0;
  for (int n : layout) {
    double acc = 0;
    for (int k = 0; k < n && u < costs.size(); ++k) acc += costs[u++];
    out.push_back(acc);
  }
  return out;
}

std::string layout_text(const std::vector<int>& layout) {
  std::string s;
  for (size_t i = 0; i < layout.size(); ++i) s += (i ? "|" : "") + std::to_string(layout[i]);
  return s;
}

}  // namespace sm
