// `tessera fleet simulate-mig`: replay a MIG fleet trace (whole GPUs, MIG slices, shares) with
// MIG shaped by demand and against the best static layout chosen in hindsight; the figures of
// docs/mig-trace-bench.md as JSON.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "placement/mig_fleet.h"

namespace tessera::cli {
namespace {

using nlohmann::json;
using placement::MigRequestKind;

struct SimulateMigOptions {
  std::string trace;
  std::optional<uint64_t> synthetic_seed;
  placement::MigTraceOptions generator;
  int nodes = 100;
  bool search = true;
  int search_budget = 400;
  std::string write_trace;
};

json ResultJson(const placement::MigSimResult& r) {
  json kinds = json::object();
  for (auto kind : {MigRequestKind::kWhole, MigRequestKind::kMig, MigRequestKind::kShare}) {
    const int k = static_cast<int>(kind);
    kinds[placement::MigRequestKindName(kind)] = {{"gpu_hours", r.gpu_hours_by_kind[k]},
                                                  {"wait_p95_s", r.wait_p95_s_by_kind[k]},
                                                  {"waiting_at_end", r.waiting_by_kind[k]}};
  }
  return {{"gpu_hours", r.gpu_hours},
          {"utilization", r.utilization},
          {"wait_p50_s", r.wait_p50_s},
          {"wait_p95_s", r.wait_p95_s},
          {"requests", r.requests},
          {"started", r.started},
          {"waiting_at_end", r.waiting_at_end},
          {"never_placeable", r.never_placeable},
          {"by_kind", kinds}};
}

std::vector<placement::MigTraceRequest> LoadTrace(const SimulateMigOptions& options) {
  if (options.trace.empty()) {
    auto options_with_seed = options.generator;
    options_with_seed.seed = *options.synthetic_seed;
    options_with_seed.total_gpus = options.nodes * 8;
    auto generated = placement::GenerateMigTrace(options_with_seed);
    if (!generated) Fail(generated.error());
    return std::move(*generated);
  }
  auto text = ReadBoundedFile(options.trace, placement::kMaxMigTraceBytes);
  if (!text) Fail(text.error().WithContext("--trace"));
  auto parsed = placement::ParseMigTrace(*text);
  if (!parsed) Fail(parsed.error().WithContext(options.trace));
  return std::move(*parsed);
}

void RunSimulateMig(const SimulateMigOptions& options) {
  const auto trace = LoadTrace(options);
  if (!options.write_trace.empty()) {
    auto written = WriteFileAtomically(options.write_trace, placement::MigTraceToText(trace));
    if (!written) Fail(written.error().WithContext("--write-trace"));
  }
  placement::MigSimOptions sim;
  sim.nodes = options.nodes;
  sim.policy = placement::MigPolicy::kByDemand;
  auto demand = placement::SimulateMigFleet(trace, sim);
  if (!demand) Fail(demand.error());
  json out = {{"nodes", options.nodes}, {"gpus", options.nodes * 8}, {"requests", trace.size()}};
  out["by_demand"] = ResultJson(*demand);
  out["by_demand"]["reconfigurations_per_hour"] = demand->reconfigurations_per_hour;
  out["by_demand"]["instances_created"] = demand->instances_created;
  out["by_demand"]["instances_destroyed"] = demand->instances_destroyed;
  out["by_demand"]["mode_changes"] = demand->mode_changes;
  if (options.search) {
    auto best = placement::SearchStaticLayouts(trace, sim, options.search_budget);
    if (!best) Fail(best.error());
    out["best_static"] = ResultJson(best->result);
    out["best_static"]["layout"] = best->split.Describe();
    out["best_static"]["candidates"] = best->candidates;
  }
  std::cout << out.dump(2) << "\n";
}

}  // namespace

void AddFleetMigSubcommand(CLI::App& fleet) {
  auto options = std::make_shared<SimulateMigOptions>();
  CLI::App* cmd = fleet.add_subcommand(
      "simulate-mig",
      "Replay a MIG fleet trace with MIG shaped by demand and against the best static layout");
  cmd->add_option("--trace", options->trace,
                  "Trace file (docs/mig-trace-bench.md: arrival_s,tenancy,kind,size,duration_s)");
  cmd->add_option("--synthetic", options->synthetic_seed, "Generate a trace from this seed");
  cmd->add_option("--hours", options->generator.hours, "Synthetic: arrivals over this many hours")
      ->check(CLI::Range(0.01, 24.0 * 365))
      ->capture_default_str();
  cmd->add_option("--load", options->generator.load, "Synthetic: offered load of the fleet")
      ->check(CLI::Range(0.01, 4.0))
      ->capture_default_str();
  cmd->add_option("--nodes", options->nodes, "Nodes of 8 H100 80GB")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  cmd->add_option("--search-budget", options->search_budget, "Static splits to simulate")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_flag("!--no-search", options->search, "Only MIG by demand (no static search)");
  cmd->add_option("--write-trace", options->write_trace, "Also write the trace simulated here");
  cmd->callback([options] {
    if (options->trace.empty() == !options->synthetic_seed)
      Fail(InvalidArgument("fleet simulate-mig: give one of --trace FILE or --synthetic SEED"));
    RunSimulateMig(*options);
  });
}

}  // namespace tessera::cli
