// Static layouts for comparison: the family of fixed per-GPU layouts (as mig-parted applies
// them), fleet splits over nodes, and the best split for a trace, chosen in hindsight.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "placement/mig_fleet.h"

namespace tessera::placement {
namespace {

// Better: more GPU-hours, then a lower p95 wait.
bool Better(const MigSimResult& a, const MigSimResult& b) {
  if (std::abs(a.gpu_hours - b.gpu_hours) > 1e-6) return a.gpu_hours > b.gpu_hours;
  return a.wait_p95_s < b.wait_p95_s;
}

// Splits as node counts per layout of the family, in family order.
using Counts = std::vector<int>;

class LayoutSearch {
 public:
  LayoutSearch(const std::vector<MigTraceRequest>& trace, const MigSimOptions& base, int budget)
      : trace_(trace), base_(base), family_(StaticLayoutFamily()), budget_(budget) {
    base_.policy = MigPolicy::kStatic;
    base_.time_decisions = false;
  }

  size_t layouts() const { return family_.size(); }
  bool exhausted() const { return best_.candidates >= budget_; }

  // Simulates one split (once); true when it is the best so far.
  Result<bool> Try(const Counts& counts) {
    if (exhausted() || !tried_.insert(counts).second) return false;
    base_.split = Split(counts);
    auto result = SimulateMigFleet(trace_, base_);
    if (!result) return result.error();
    results_[counts] = *result;
    ++best_.candidates;
    if (best_.candidates > 1 && !Better(*result, best_.result)) return false;
    best_.split = base_.split;
    best_.result = *result;
    best_counts_ = counts;
    return true;
  }

  const MigSimResult* Lookup(const Counts& counts) const {
    auto it = results_.find(counts);
    return it == results_.end() ? nullptr : &it->second;
  }
  const Counts& best_counts() const { return best_counts_; }
  StaticSearchResult& best() { return best_; }

 private:
  FleetSplit Split(const Counts& counts) const {
    FleetSplit split;
    for (size_t l = 0; l < counts.size(); ++l)
      if (counts[l] > 0) split.nodes.push_back({family_[l], counts[l]});
    return split;
  }

  const std::vector<MigTraceRequest>& trace_;
  MigSimOptions base_;
  std::vector<StaticLayout> family_;
  int budget_;
  std::set<Counts> tried_;
  std::map<Counts, MigSimResult> results_;
  Counts best_counts_;
  StaticSearchResult best_;
};

// Stage 1: whole nodes in eighths, the rest one layout (layout 0 is whole).
Status WholeAndOne(LayoutSearch& search, int nodes) {
  for (int eighth = 0; eighth <= 8; ++eighth) {
    const int whole = static_cast<int>(std::lround(nodes * eighth / 8.0));
    for (size_t l = 1; l < search.layouts(); ++l) {
      Counts counts(search.layouts(), 0);
      counts[0] = whole;
      counts[l] += nodes - whole;
      if (auto tried = search.Try(counts); !tried) return tried.error();
    }
  }
  return {};
}

// Stage 2: at the best whole count, the four best layouts in pairs and threes.
Status Mixes(LayoutSearch& search, int nodes) {
  const int whole = search.best_counts()[0], mig = nodes - whole;
  std::vector<std::pair<const MigSimResult*, size_t>> singles;
  for (size_t l = 1; l < search.layouts(); ++l) {
    Counts counts(search.layouts(), 0);
    counts[0] = whole;
    counts[l] += mig;
    if (const MigSimResult* result = search.Lookup(counts)) singles.push_back({result, l});
  }
  std::stable_sort(singles.begin(), singles.end(),
                   [](const auto& a, const auto& b) { return Better(*a.first, *b.first); });
  const size_t top = std::min<size_t>(4, singles.size());
  for (size_t a = 0; a < top; ++a) {
    for (size_t b = a + 1; b < top; ++b) {
      Counts counts(search.layouts(), 0);
      counts[0] = whole;
      for (int quarter = 1; quarter <= 3; ++quarter) {
        counts[singles[a].second] = static_cast<int>(std::lround(mig * quarter / 4.0));
        counts[singles[b].second] = mig - counts[singles[a].second];
        if (auto tried = search.Try(counts); !tried) return tried.error();
      }
      for (size_t c = b + 1; c < top; ++c) {
        Counts three(search.layouts(), 0);
        three[0] = whole;
        three[singles[a].second] = three[singles[b].second] = mig / 3;
        three[singles[c].second] = mig - 2 * (mig / 3);
        if (auto tried = search.Try(three); !tried) return tried.error();
      }
    }
  }
  return {};
}

// Stage 3: from the best, move `step` nodes from one layout to another while that improves.
Status Climb(LayoutSearch& search) {
  for (int step : {8, 4, 2}) {
    bool improved = true;
    while (improved && !search.exhausted()) {
      improved = false;
      const Counts from_here = search.best_counts();
      for (size_t from = 0; from < from_here.size() && !improved; ++from) {
        if (from_here[from] < step) continue;
        for (size_t to = 0; to < from_here.size() && !improved; ++to) {
          if (to == from) continue;
          Counts counts = from_here;
          counts[from] -= step;
          counts[to] += step;
          auto tried = search.Try(counts);
          if (!tried) return tried.error();
          improved = *tried;
        }
      }
    }
  }
  return {};
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

Result<StaticSearchResult> SearchStaticLayouts(const std::vector<MigTraceRequest>& trace,
                                               const MigSimOptions& base, int max_candidates) {
  LayoutSearch search(trace, base, std::max(1, max_candidates));
  for (auto stage : {WholeAndOne, Mixes}) {
    if (Status status = stage(search, base.nodes); !status) return status.error();
  }
  if (Status status = Climb(search); !status) return status.error();
  if (search.best().candidates == 0) return InvalidArgument("no static split searched");
  return search.best();
}

}  // namespace tessera::placement
