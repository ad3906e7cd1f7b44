// Static layouts for comparison: the family of fixed per-GPU layouts (as mig-parted applies
// them), fleet splits over nodes, and the best split for a trace, chosen in hindsight.
#include <algorithm>
#include <cmath>

#include "placement/mig_fleet.h"

namespace tessera::placement {
namespace {

// Better: more GPU-hours, then a lower p95 wait.
bool Better(const MigSimResult& a, const MigSimResult& b) {
  if (std::abs(a.gpu_hours - b.gpu_hours) > 1e-6) return a.gpu_hours > b.gpu_hours;
  return a.wait_p95_s < b.wait_p95_s;
}

class LayoutSearch {
 public:
  LayoutSearch(const std::vector<MigTraceRequest>& trace, const MigSimOptions& base)
      : trace_(trace), base_(base) {
    base_.policy = MigPolicy::kStatic;
    base_.time_decisions = false;
  }

  // Simulates one split; the best so far is kept.
  Result<MigSimResult> Try(FleetSplit split) {
    base_.split = split;
    auto result = SimulateMigFleet(trace_, base_);
    if (!result) return result.error();
    ++best_.candidates;
    if (best_.candidates == 1 || Better(*result, best_.result)) {
      best_.split = std::move(split);
      best_.result = *result;
    }
    return result;
  }

  StaticSearchResult& best() { return best_; }

 private:
  const std::vector<MigTraceRequest>& trace_;
  MigSimOptions base_;
  StaticSearchResult best_;
};

FleetSplit Split(const StaticLayout& whole, int whole_nodes,
                 const std::vector<std::pair<const StaticLayout*, int>>& mig) {
  FleetSplit split;
  if (whole_nodes > 0) split.nodes.push_back({whole, whole_nodes});
  for (const auto& entry : mig)
    if (entry.second > 0) split.nodes.push_back({*entry.first, entry.second});
  return split;
}

}  // namespace

std::vector<StaticLayout> StaticLayoutFamily() {
  auto repeat = [](const char* profile, int n) { return std::vector<std::string>(n, profile); };
  return {
      {"whole", {}},
      {"all-1g.10gb", repeat("1g.10gb", 7)},
      {"all-1g.20gb", repeat("1g.20gb", 4)},
      {"all-2g.20gb", repeat("2g.20gb", 3)},
      {"all-3g.40gb", repeat("3g.40gb", 2)},
      {"3g+2g+1g+1g", {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}},
      {"2g+2g+1g.20gb+1g", {"2g.20gb", "2g.20gb", "1g.20gb", "1g.10gb"}},
      {"4g+3g", {"4g.40gb", "3g.40gb"}},
      {"4g+2g+1g", {"4g.40gb", "2g.20gb", "1g.10gb"}},
      {"4g+1g+1g+1g", {"4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"}},
      {"all-7g.80gb", {"7g.80gb"}},
  };
}

std::string FleetSplit::Describe() const {
  std::string out;
  for (const auto& [layout, count] : nodes) {
    if (!out.empty()) out += ", ";
    out += std::to_string(count) + " nodes " + layout.name;
  }
  return out.empty() ? "no nodes" : out;
}

// Stage 1: 0..all nodes whole in eighths, the rest one MIG layout. Stage 2: at the best whole
// count, the four best MIG layouts of stage 1 in pairs (1/4, 1/2, 3/4) and in threes (thirds).
Result<StaticSearchResult> SearchStaticLayouts(const std::vector<MigTraceRequest>& trace,
                                               const MigSimOptions& base) {
  const std::vector<StaticLayout> family = StaticLayoutFamily();
  const StaticLayout& whole = family.front();
  LayoutSearch search(trace, base);
  std::vector<std::pair<MigSimResult, size_t>> singles;  // at the best whole count, per layout
  int best_whole = 0;
  for (int eighth = 0; eighth <= 8; ++eighth) {
    const int whole_nodes = static_cast<int>(std::lround(base.nodes * eighth / 8.0));
    const int mig_nodes = base.nodes - whole_nodes;
    for (size_t l = 1; l < family.size() && (mig_nodes > 0 || l == 1); ++l) {
      auto result = search.Try(Split(whole, whole_nodes, {{&family[l], mig_nodes}}));
      if (!result) return result.error();
    }
  }
  const FleetSplit& stage1 = search.best().split;
  if (!stage1.nodes.empty() && stage1.nodes.front().first.profiles.empty())
    best_whole = stage1.nodes.front().second;
  const int mig_nodes = base.nodes - best_whole;
  if (mig_nodes < 2) return search.best();
  for (size_t l = 1; l < family.size(); ++l) {
    auto result = search.Try(Split(whole, best_whole, {{&family[l], mig_nodes}}));
    if (!result) return result.error();
    singles.push_back({*result, l});
  }
  std::stable_sort(singles.begin(), singles.end(),
                   [](const auto& a, const auto& b) { return Better(a.first, b.first); });
  const size_t top = std::min<size_t>(4, singles.size());
  for (size_t a = 0; a < top; ++a) {
    for (size_t b = a + 1; b < top; ++b) {
      const StaticLayout *la = &family[singles[a].second], *lb = &family[singles[b].second];
      for (int quarter = 1; quarter <= 3; ++quarter) {
        const int na = static_cast<int>(std::lround(mig_nodes * quarter / 4.0));
        auto result = search.Try(Split(whole, best_whole, {{la, na}, {lb, mig_nodes - na}}));
        if (!result) return result.error();
      }
      for (size_t c = b + 1; c < top; ++c) {
        const int third = mig_nodes / 3;
        auto result = search.Try(
            Split(whole, best_whole,
                  {{la, third}, {lb, third}, {&family[singles[c].second], mig_nodes - 2 * third}}));
        if (!result) return result.error();
      }
    }
  }
  return search.best();
}

}  // namespace tessera::placement
