// Link-based scoring of GPU sets. Every pair's score is computed once; for up to 16 GPUs the
// score of every subset is precomputed too (2^16 ints), so choosing is a scan over candidate
// masks with one table lookup each.
#include <algorithm>
#include <set>

#include "topology/topology.h"

namespace tessera::topology {
namespace {

// Two GPUs are behind the same PCIe switch when their bridge chains share a bridge below the
// root port (the chain's last element).
bool ShareSwitch(const GpuInfo& a, const GpuInfo& b) {
  if (a.upstream_bridges.size() < 2 || b.upstream_bridges.size() < 2) return false;
  for (size_t i = 0; i + 1 < a.upstream_bridges.size(); ++i) {
    for (size_t j = 0; j + 1 < b.upstream_bridges.size(); ++j) {
      if (a.upstream_bridges[i] == b.upstream_bridges[j]) return true;
    }
  }
  return false;
}

// Is `a` preferred over `b` on a score tie: the lowest GPU index in which they differ is in `a`.
bool PreferredOnTie(GpuMask a, GpuMask b) {
  GpuMask diff = a ^ b;
  return diff != 0 && (a & diff & (~diff + 1)) != 0;
}

}  // namespace

const char* LinkTypeName(LinkType type) {
  switch (type) {
    case LinkType::kNvLink:
      return "nvlink";
    case LinkType::kSamePcieSwitch:
      return "same-pcie-switch";
    case LinkType::kSameNumaNode:
      return "same-numa-node";
    case LinkType::kCrossSocket:
      return "cross-socket";
  }
  return "cross-socket";
}

GpuSetScorer::GpuSetScorer(GpuTopology topology, LinkWeights weights)
    : topology_(std::move(topology)), weights_(weights) {
  const int n = gpu_count();
  link_.assign(n * n, LinkType::kSameNumaNode);
  pair_.assign(n * n, 0);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const GpuInfo& ga = topology_.gpus[a];
      const GpuInfo& gb = topology_.gpus[b];
      LinkType pcie;
      int points;
      if (ShareSwitch(ga, gb)) {
        pcie = LinkType::kSamePcieSwitch;
        points = weights_.same_pcie_switch;
      } else if (ga.numa_node < 0 || gb.numa_node < 0 || ga.numa_node == gb.numa_node) {
        pcie = LinkType::kSameNumaNode;
        points = weights_.same_numa_node;
      } else {
        pcie = LinkType::kCrossSocket;
        points = weights_.cross_socket;
      }
      int links = topology_.nvlinks.empty() ? 0 : topology_.nvlinks[a][b];
      link_[a * n + b] = links > 0 ? LinkType::kNvLink : pcie;
      pair_[a * n + b] = links * weights_.per_nvlink + points;
    }
  }
  if (n <= kMaxExactGpus) {
    set_score_.assign(size_t{1} << n, 0);
    for (GpuMask mask = 1; mask < (GpuMask{1} << n); ++mask) {
      int low = __builtin_ctzll(mask);
      GpuMask rest = mask & (mask - 1);
      int32_t score = set_score_[rest];
      for (GpuMask r = rest; r; r &= r - 1)
        score += pair_[low * n + __builtin_ctzll(r)];
      set_score_[mask] = score;
    }
  }
}

Result<std::shared_ptr<const GpuSetScorer>> GpuSetScorer::Create(GpuTopology topology,
                                                                 LinkWeights weights) {
  const size_t n = topology.gpus.size();
  if (n > static_cast<size_t>(kMaxGpus)) {
    return InvalidArgument("topology: " + std::to_string(n) + " GPUs, more than " +
                           std::to_string(kMaxGpus));
  }
  std::set<std::string> ids;
  for (size_t i = 0; i < n; ++i) {
    const std::string& id = topology.gpus[i].id;
    if (id.empty()) return InvalidArgument("topology: gpus[" + std::to_string(i) + "]: empty id");
    if (!ids.insert(id).second) {
      return InvalidArgument("topology: gpus[" + std::to_string(i) + "]: duplicate id " + id);
    }
  }
  if (!topology.nvlinks.empty()) {
    if (topology.nvlinks.size() != n) {
      return InvalidArgument("topology: nvlinks has " + std::to_string(topology.nvlinks.size()) +
                             " rows for " + std::to_string(n) + " GPUs");
    }
    for (size_t a = 0; a < n; ++a) {
      if (topology.nvlinks[a].size() != n) {
        return InvalidArgument("topology: nvlinks[" + std::to_string(a) + "] has " +
                               std::to_string(topology.nvlinks[a].size()) + " columns for " +
                               std::to_string(n) + " GPUs");
      }
      for (size_t b = 0; b < n; ++b) {
        int links = topology.nvlinks[a][b];
        const std::string where =
            "topology: nvlinks[" + std::to_string(a) + "][" + std::to_string(b) + "]";
        if (links < 0 || links > 64) {
          return InvalidArgument(where + ": " + std::to_string(links) + " links (expected 0..64)");
        }
        if (a != b && links != topology.nvlinks[b][a]) {
          return InvalidArgument(where + ": " + std::to_string(links) + " differs from nvlinks[" +
                                 std::to_string(b) + "][" + std::to_string(a) + "] (" +
                                 std::to_string(topology.nvlinks[b][a]) + ")");
        }
      }
    }
  }
  for (int* w : {&weights.per_nvlink, &weights.same_pcie_switch, &weights.same_numa_node,
                 &weights.cross_socket}) {
    if (*w < 0 || *w > 10000) return InvalidArgument("link weights must be within 0..10000");
  }
  return std::shared_ptr<const GpuSetScorer>(new GpuSetScorer(std::move(topology), weights));
}

LinkType GpuSetScorer::Link(int a, int b) const {
  return link_[a * gpu_count() + b];
}

int64_t GpuSetScorer::Score(GpuMask set) const {
  if (!set_score_.empty()) return set_score_[set];
  int64_t score = 0;
  for (GpuMask a = set; a; a &= a - 1) {
    int i = __builtin_ctzll(a);
    for (GpuMask b = a & (a - 1); b; b &= b - 1)
      score += PairScore(i, __builtin_ctzll(b));
  }
  return score;
}

Result<GpuMask> GpuSetScorer::Choose(GpuMask available, int size, GpuMask must) const {
  const int n = gpu_count();
  const GpuMask all = n == 64 ? ~GpuMask{0} : (GpuMask{1} << n) - 1;
  if ((available & ~all) || (must & ~all)) {
    return InvalidArgument("GPU index beyond the " + std::to_string(n) + " GPUs of the node");
  }
  if (must & ~available) {
    return InvalidArgument("required GPUs " + MaskToString(must & ~available, 0) +
                           " are not available");
  }
  if (size < 1) return InvalidArgument("allocation size " + std::to_string(size) + " < 1");
  if (MaskSize(must) > size) {
    return InvalidArgument(std::to_string(MaskSize(must)) +
                           " required GPUs exceed allocation size " + std::to_string(size));
  }
  if (MaskSize(available) < size) {
    return NotFound("only " + std::to_string(MaskSize(available)) + " GPUs available, " +
                    std::to_string(size) + " asked for");
  }
  const GpuMask optional = available & ~must;
  const int extra = size - MaskSize(must);
  if (extra == 0) return must;

  if (n <= kMaxExactGpus) {
    // Enumerate every `extra`-subset of the optional GPUs (Gosper's hack over their positions).
    std::vector<int> bits = MaskToIndices(optional);
    const int m = static_cast<int>(bits.size());
    GpuMask best = 0;
    int64_t best_score = -1;
    for (GpuMask combo = (GpuMask{1} << extra) - 1; combo < (GpuMask{1} << m);) {
      GpuMask set = must;
      for (GpuMask c = combo; c; c &= c - 1)
        set |= GpuMask{1} << bits[__builtin_ctzll(c)];
      int64_t score = set_score_[set];
      if (score > best_score || (score == best_score && PreferredOnTie(set, best))) {
        best = set;
        best_score = score;
      }
      GpuMask low = combo & (~combo + 1);
      GpuMask ripple = combo + low;
      combo = (((ripple ^ combo) >> 2) / low) | ripple;
    }
    return best;
  }

  // Greedy above 16 GPUs: grow the set by the GPU that adds the most, lowest index on ties.
  GpuMask set = must;
  for (int step = 0; step < extra; ++step) {
    int best_gpu = -1;
    int64_t best_gain = -1;
    for (GpuMask o = optional & ~set; o; o &= o - 1) {
      int g = __builtin_ctzll(o);
      int64_t gain = 0;
      GpuMask others = set ? set : (available & ~(GpuMask{1} << g));
      for (GpuMask s = others; s; s &= s - 1)
        gain += PairScore(g, __builtin_ctzll(s));
      if (gain > best_gain) {
        best_gain = gain;
        best_gpu = g;
      }
    }
    set |= GpuMask{1} << best_gpu;
  }
  return set;
}

}  // namespace tessera::topology
