// `tessera fleet simulate`: run a placement policy over a request trace and report what it
// admitted.
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "common/atomic_file.h"
#include "placement/placement.h"
#include "scheduling/scheduling.h"
#include "topology/topology.h"

namespace tessera::cli {
namespace {

struct SimulateOptions {
  int nodes = 100;
  int gpus_per_node = 8;
  std::string policy = "binpack";
  std::string partitions = "auto";
  std::string trace;
  std::optional<uint64_t> synthetic_seed;
  double load = 0.94;
  int requests = 20000;
  double duration_median_s = 3600;
  double duration_sigma = 1.0;
  std::string format = "json";
  bool queue = false;
  bool no_timing = false;
  std::string write_trace;
  // Tenancies (with --scheduling).
  std::string scheduling;
  std::vector<std::string> tenancy_weights;  // NAME=W
  std::vector<std::string> tenancy_quotas;   // NAME=GPUS
  std::vector<std::string> tenants;          // synthetic: NAME=LOAD
  double half_life_s = 3600;
  int reservations = 8;
  bool no_duration_limits = false;
};

// "NAME=VALUE" with a trace tenancy name and a number.
Result<std::pair<std::string, double>> NameAndNumber(const std::string& option,
                                                     const std::string& text) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, std::min(eq, size_t{64}));
  auto bad = [&] {
    return InvalidArgument(option + " " + text.substr(0, 80) +
                           ": expected NAME=NUMBER with NAME of a-z, 0-9 and '-'");
  };
  if (eq == std::string::npos || eq == 0 || eq > placement::kMaxTraceTenancyLength) return bad();
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return bad();
  const std::string number = text.substr(eq + 1);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(value)) {
    return bad();
  }
  return std::make_pair(name, value);
}

Result<std::shared_ptr<const topology::PartitionPlanner>> LoadPartitions(
    const SimulateOptions& options) {
  std::string spec = options.partitions;
  if (spec == "none") return std::shared_ptr<const topology::PartitionPlanner>();
  if (spec == "auto") {
    if (options.gpus_per_node != 8) return std::shared_ptr<const topology::PartitionPlanner>();
    spec = "hgx-h100-8gpu";
  }
  Result<topology::PartitionTable> table = topology::PresetTable(spec);
  if (!table) {
    auto text = ReadWholeFile(spec);
    if (!text) {
      return InvalidArgument("--partitions " + spec +
                             ": neither a preset (hgx-h100-8gpu, hgx-h200-8gpu, none, auto) nor a "
                             "readable file: " +
                             text.error().message);
    }
    table = topology::ParsePartitionTableFile(spec, *text);
    if (!table) return table.error();
  }
  return topology::PartitionPlanner::Create(std::move(*table));
}

void RunTenancySimulation(const SimulateOptions& options, placement::Policy policy,
                          placement::Fleet fleet, std::vector<placement::Request> requests) {
  auto mode = scheduling::ParseMode(options.scheduling);
  if (!mode) Fail(mode.error());
  scheduling::QueueSimulationOptions sim;
  sim.scheduler.mode = *mode;
  sim.scheduler.placement = policy;
  sim.scheduler.half_life_s = options.half_life_s;
  sim.scheduler.max_reservations = options.reservations;
  sim.duration_limits = !options.no_duration_limits;
  for (const std::string& text : options.tenancy_weights) {
    auto parsed = NameAndNumber("--tenancy-weight", text);
    if (!parsed) Fail(parsed.error());
    sim.tenancies[parsed->first].weight = parsed->second;
  }
  for (const std::string& text : options.tenancy_quotas) {
    auto parsed = NameAndNumber("--tenancy-quota", text);
    if (!parsed) Fail(parsed.error());
    if (parsed->second != std::floor(parsed->second) || parsed->second < 0 ||
        parsed->second > scheduling::kMaxQuotaGpus) {
      Fail(InvalidArgument("--tenancy-quota " + text.substr(0, 80) +
                           ": GPUS must be a whole number 0.." +
                           std::to_string(scheduling::kMaxQuotaGpus)));
    }
    sim.tenancies[parsed->first].quota_gpus = static_cast<int>(parsed->second);
  }
  for (const auto& [name, policy] : sim.tenancies) {
    if (auto valid = scheduling::ValidateTenancyPolicy(policy); !valid) {
      Fail(valid.error().WithContext("tenancy " + name));
    }
  }
  if (*mode == scheduling::Mode::kFifo && !options.tenancy_quotas.empty()) {
    Fail(InvalidArgument("--tenancy-quota needs --scheduling fair (fifo is the plain queue)"));
  }
  auto result = scheduling::SimulateQueue(std::move(fleet), std::move(requests), sim);
  if (!result) Fail(result.error());
  if (options.format == "json") {
    std::cout << scheduling::QueueSimulationToJson(*result, !options.no_timing) << '\n';
    return;
  }
  const auto& r = *result;
  std::cout << "scheduling         " << r.scheduling << " (placement " << r.base.policy << ")\n"
            << "fleet              " << r.base.nodes << " nodes, " << r.base.gpus << " GPUs\n"
            << "requests           " << r.base.requests << ", admitted " << r.base.admitted << "\n"
            << "GPU utilization    " << 100 * r.base.gpu_utilization << " %\n";
  for (const auto& [name, t] : r.per_tenancy) {
    std::cout << "tenancy " << name << ": " << t.admitted << "/" << t.requests
              << " admitted, share " << 100 * t.share << " %, wait p50 " << t.wait_p50_s
              << " s, p95 " << t.wait_p95_s << " s, max " << t.wait_max_s << " s\n";
  }
  std::cout << "Jain's index       " << r.jain_fairness << " over " << r.backlogged.size()
            << " backlogged tenancies\n";
}

void RunSimulate(const SimulateOptions& options) {
  auto policy = placement::ParsePolicy(options.policy);
  if (!policy) Fail(policy.error());
  auto planner = LoadPartitions(options);
  if (!planner) Fail(planner.error());
  auto fleet = placement::Fleet::Uniform(options.nodes, options.gpus_per_node, *planner);
  if (!fleet) Fail(fleet.error());

  const bool tenancies = !options.scheduling.empty();
  std::vector<placement::Request> requests;
  if (!options.trace.empty()) {
    auto text = ReadWholeFile(options.trace);
    if (!text) Fail(text.error().WithContext("--trace " + options.trace));
    auto parsed = placement::ParseTraceCsv(*text);
    if (!parsed) Fail(parsed.error().WithContext(options.trace));
    requests = std::move(*parsed);
  } else {
    placement::SyntheticOptions synthetic;
    synthetic.seed = *options.synthetic_seed;
    synthetic.load = options.load;
    synthetic.total_gpus = fleet->total_gpus();
    synthetic.requests = options.requests;
    synthetic.duration_median_s = options.duration_median_s;
    synthetic.duration_sigma = options.duration_sigma;
    if (options.tenants.empty()) {
      auto generated = placement::SyntheticTrace(synthetic);
      if (!generated) Fail(generated.error());
      requests = std::move(*generated);
    } else {
      std::vector<scheduling::TenantLoad> loads;
      for (const std::string& text : options.tenants) {
        auto parsed = NameAndNumber("--tenant", text);
        if (!parsed) Fail(parsed.error());
        loads.push_back({parsed->first, parsed->second});
      }
      auto generated = scheduling::SyntheticTenantTrace(synthetic, loads);
      if (!generated) Fail(generated.error());
      requests = std::move(*generated);
    }
  }
  if (!options.write_trace.empty()) {
    if (auto written = WriteFileAtomically(options.write_trace, placement::TraceToCsv(requests));
        !written) {
      Fail(written.error());
    }
  }
  if (tenancies) {
    RunTenancySimulation(options, *policy, std::move(*fleet), std::move(requests));
    return;
  }
  placement::SimulationOptions sim;
  sim.policy = *policy;
  sim.queue = options.queue;
  auto result = placement::Simulate(std::move(*fleet), std::move(requests), sim);
  if (!result) Fail(result.error());
  if (options.format == "json") {
    std::cout << placement::SimulationToJson(*result, !options.no_timing) << '\n';
    return;
  }
  const auto& r = *result;
  std::cout << "policy             " << r.policy << "\n"
            << "fleet              " << r.nodes << " nodes, " << r.gpus << " GPUs\n"
            << "requests           " << r.requests << "\n"
            << "admitted           " << r.admitted << "\n";
  for (const auto& [size, count] : r.requests_by_size) {
    auto it = r.admitted_by_size.find(size);
    std::cout << "  " << size << " GPU" << (size == 1 ? " " : "s") << "           "
              << (it == r.admitted_by_size.end() ? 0 : it->second) << " of " << count << "\n";
  }
  std::cout << "offered GPU-hours  " << r.offered_gpu_hours << "\n"
            << "served GPU-hours   " << r.served_gpu_hours << " ("
            << (r.offered_gpu_hours > 0 ? 100 * r.served_gpu_hours / r.offered_gpu_hours : 0)
            << " %)\n"
            << "GPU utilization    " << 100 * r.gpu_utilization << " %\n";
  if (!options.no_timing) {
    std::cout << "decisions/second   "
              << (r.elapsed_s > 0 ? static_cast<int64_t>(r.decisions / r.elapsed_s) : 0) << "\n";
  }
}

// The simulated fleet: its size, placement policy and partition tables.
void AddSimulateFleetFlags(CLI::App* cmd, SimulateOptions& options) {
  cmd->add_option("--nodes", options.nodes, "Nodes in the fleet")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--gpus-per-node", options.gpus_per_node, "GPUs per node")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--policy", options.policy, "Placement policy")
      ->check(CLI::IsMember({"binpack", "spread", "first-fit"}))
      ->capture_default_str();
  cmd->add_option("--partitions", options.partitions,
                  "Fabric partition table on every node: auto (HGX table for 8-GPU nodes), none, "
                  "a preset name, or a .yaml/.json file")
      ->capture_default_str();
}

// The requests: a trace file, or a synthetic trace and its shape.
void AddSimulateTraceFlags(CLI::App* cmd, SimulateOptions& options) {
  auto* trace = cmd->add_option("--trace", options.trace,
                                "Trace CSV: arrival_s,duration_s,gpus (docs/fleet-simulate.md)");
  auto* synthetic = cmd->add_option("--synthetic", options.synthetic_seed,
                                    "Generate a synthetic trace with this seed");
  trace->excludes(synthetic);
  synthetic->excludes(trace);
  cmd->add_option("--load", options.load, "Synthetic: offered load (fraction of fleet GPUs)")
      ->check(CLI::Range(0.001, 100.0))
      ->capture_default_str();
  cmd->add_option("--requests", options.requests, "Synthetic: number of requests")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--duration-median", options.duration_median_s,
                  "Synthetic: median request duration in seconds (log-normal)")
      ->capture_default_str();
  cmd->add_option("--duration-sigma", options.duration_sigma,
                  "Synthetic: sigma of the log-normal duration")
      ->capture_default_str();
}

// What is reported and written, and whether requests queue.
void AddSimulateOutputFlags(CLI::App* cmd, SimulateOptions& options) {
  cmd->add_option("--format", options.format, "Output format")
      ->check(CLI::IsMember({"json", "text"}))
      ->capture_default_str();
  cmd->add_flag("--queue", options.queue,
                "Requests that do not fit wait for capacity instead of being rejected");
  cmd->add_flag("--no-timing", options.no_timing,
                "Leave out decisions_per_second so equal inputs give byte-identical output");
  cmd->add_option("--write-trace", options.write_trace,
                  "Also write the trace that was simulated to this CSV file");
}

// The queue's scheduling policy and its fair-share settings.
void AddSimulateFairShareFlags(CLI::App* cmd, SimulateOptions& options) {
  cmd->add_option("--scheduling", options.scheduling,
                  "With --queue: the queue's policy, fifo (as without this option, plus "
                  "per-tenancy figures) or fair (shares, quotas, reservations)")
      ->check(CLI::IsMember({"fifo", "fair"}));
  cmd->add_option("--tenancy-weight", options.tenancy_weights,
                  "NAME=W: a tenancy's fair-share weight (repeatable; default 1)");
  cmd->add_option("--tenancy-quota", options.tenancy_quotas,
                  "NAME=GPUS: most GPUs a tenancy may use at once (repeatable; fair only)");
  cmd->add_option("--tenant", options.tenants,
                  "Synthetic multi-tenant trace: NAME=LOAD, each tenant its own stream offering "
                  "LOAD of the fleet (repeatable; requests split by load)");
  cmd->add_option("--half-life", options.half_life_s, "Fair: half-life of recent usage in seconds")
      ->check(CLI::Range(1.0, 365.0 * 24 * 3600))
      ->capture_default_str();
  cmd->add_option("--reservations", options.reservations,
                  "Fair: requests that do not fit and get a reservation per pass (0: none)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--no-duration-limits", options.no_duration_limits,
                "Fair: requests declare no maxDurationSeconds (no backfill into reservations)");
}

// The combinations of flags CLI11 cannot refuse by itself.
void CheckSimulateOptions(const SimulateOptions& options) {
  if (options.trace.empty() && !options.synthetic_seed) {
    Fail(InvalidArgument("fleet simulate: give --trace FILE or --synthetic SEED"));
  }
  const bool tenancy_options = !options.tenancy_weights.empty() ||
                               !options.tenancy_quotas.empty() || !options.tenants.empty();
  if (!options.scheduling.empty() && !options.queue) {
    Fail(InvalidArgument("--scheduling needs --queue"));
  }
  if (tenancy_options && options.scheduling.empty()) {
    Fail(InvalidArgument("--tenancy-weight, --tenancy-quota and --tenant need --scheduling"));
  }
  if (!options.tenants.empty() && !options.trace.empty()) {
    Fail(InvalidArgument("--tenant makes a synthetic trace: use it with --synthetic"));
  }
}

}  // namespace

void AddFleetCommand(CLI::App& app) {
  CLI::App* fleet = app.add_subcommand("fleet", "Fleet placement tools");
  fleet->require_subcommand(1);
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* cmd = fleet->add_subcommand(
      "simulate", "Replay a request trace against a placement policy and report what it admitted");
  AddSimulateFleetFlags(cmd, *options);
  AddSimulateTraceFlags(cmd, *options);
  AddSimulateOutputFlags(cmd, *options);
  AddSimulateFairShareFlags(cmd, *options);
  cmd->callback([options] {
    CheckSimulateOptions(*options);
    RunSimulate(*options);
  });
  AddFleetMigSubcommand(*fleet);
}

}  // namespace tessera::cli
