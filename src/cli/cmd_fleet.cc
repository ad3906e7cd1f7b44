// `tessera fleet simulate`: run a placement policy over a request trace and report what it
// admitted.
#include <iostream>

#include "cli/commands.h"
#include "common/atomic_file.h"
#include "placement/placement.h"
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
};

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

void RunSimulate(const SimulateOptions& options) {
  auto policy = placement::ParsePolicy(options.policy);
  if (!policy) Fail(policy.error());
  auto planner = LoadPartitions(options);
  if (!planner) Fail(planner.error());
  auto fleet = placement::Fleet::Uniform(options.nodes, options.gpus_per_node, *planner);
  if (!fleet) Fail(fleet.error());

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
    auto generated = placement::SyntheticTrace(synthetic);
    if (!generated) Fail(generated.error());
    requests = std::move(*generated);
  }
  if (!options.write_trace.empty()) {
    if (auto written = WriteFileAtomically(options.write_trace, placement::TraceToCsv(requests));
        !written) {
      Fail(written.error());
    }
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

}  // namespace

void AddFleetCommand(CLI::App& app) {
  CLI::App* fleet = app.add_subcommand("fleet", "Fleet placement tools");
  fleet->require_subcommand(1);
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* cmd = fleet->add_subcommand(
      "simulate", "Replay a request trace against a placement policy and report what it admitted");
  cmd->add_option("--nodes", options->nodes, "Nodes in the fleet")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--gpus-per-node", options->gpus_per_node, "GPUs per node")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--policy", options->policy, "Placement policy")
      ->check(CLI::IsMember({"binpack", "spread", "first-fit"}))
      ->capture_default_str();
  cmd->add_option("--partitions", options->partitions,
                  "Fabric partition table on every node: auto (HGX table for 8-GPU nodes), none, "
                  "a preset name, or a .yaml/.json file")
      ->capture_default_str();
  auto* trace = cmd->add_option("--trace", options->trace,
                                "Trace CSV: arrival_s,duration_s,gpus (docs/fleet-simulate.md)");
  auto* synthetic = cmd->add_option("--synthetic", options->synthetic_seed,
                                    "Generate a synthetic trace with this seed");
  trace->excludes(synthetic);
  synthetic->excludes(trace);
  cmd->add_option("--load", options->load, "Synthetic: offered load (fraction of fleet GPUs)")
      ->check(CLI::Range(0.001, 100.0))
      ->capture_default_str();
  cmd->add_option("--requests", options->requests, "Synthetic: number of requests")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--duration-median", options->duration_median_s,
                  "Synthetic: median request duration in seconds (log-normal)")
      ->capture_default_str();
  cmd->add_option("--duration-sigma", options->duration_sigma,
                  "Synthetic: sigma of the log-normal duration")
      ->capture_default_str();
  cmd->add_option("--format", options->format, "Output format")
      ->check(CLI::IsMember({"json", "text"}))
      ->capture_default_str();
  cmd->add_flag("--queue", options->queue,
                "Requests that do not fit wait for capacity instead of being rejected");
  cmd->add_flag("--no-timing", options->no_timing,
                "Leave out decisions_per_second so equal inputs give byte-identical output");
  cmd->add_option("--write-trace", options->write_trace,
                  "Also write the trace that was simulated to this CSV file");
  cmd->callback([options] {
    if (options->trace.empty() && !options->synthetic_seed) {
      Fail(InvalidArgument("fleet simulate: give --trace FILE or --synthetic SEED"));
    }
    RunSimulate(*options);
  });
}

}  // namespace tessera::cli
