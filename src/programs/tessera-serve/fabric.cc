// Shared NVSwitch mode (--fabric-manager): the fabric manager's partitions are the placement
// table, and every container's partition is activated around it.
#include <spdlog/spdlog.h>

#include "wiring.h"

namespace tessera::serve_program {

std::shared_ptr<fabricmanager::PartitionActivator> OpenFabricManager(
    const ServeFlags& flags, const DataDir& data, const HostGpus& host,
    serve::ServiceOptions& options) {
  if (flags.fabric_manager.empty()) return nullptr;
  if (host.fleet_mode)
    Die(
        InvalidArgument("--fabric-manager: with --backend kubernetes each node's agent "
                        "(tessera-lease-sync --fabric-manager) or DRA plugin owns its partitions"));
  auto address = fabricmanager::ParseFabricAddress(flags.fabric_manager);
  if (!address) Die(address.error().WithContext("--fabric-manager"));
  // In its range (CheckFlags).
  auto timeout =
      serve::ParseDurationFlag(serve::kFabricManagerTimeoutFlag, flags.fabric_manager_timeout);
  if (!timeout) Die(timeout.error());
  fabricmanager::FabricSetup setup;
  setup.nvfm.library = flags.nvfm_library;
  setup.nvfm.timeout_ms = static_cast<unsigned>(timeout->count());
  setup.nvfm.address = *address;
  setup.table = options.partition_table;
  setup.nvml_library = host.nvml_library;
  for (const auto* gpu : host.inventory.Gpus())
    setup.host_gpus.push_back(gpu->pci_address);
  setup.ledger_path = data.path + "/fabric-partitions.json";
  auto opened = fabricmanager::OpenFabric(std::move(setup));
  if (!opened) Die(opened.error().WithContext("--fabric-manager"));
  options.partition_table = std::move(opened->table);
  std::shared_ptr<fabricmanager::PartitionActivator> fabric = std::move(opened->activator);
  options.extra_metrics = [fabric] { return fabric->MetricsText(); };
  spdlog::info("fabric manager: {}; {} partitions, placement in whole partitions",
               fabric->Describe(), options.partition_table->partitions.size());
  return fabric;
}

std::unique_ptr<fabricmanager::FabricHealthWatch> WatchFabricHealth(
    const ServeFlags& flags, const fabricmanager::PartitionActivator* fabric,
    serve::Service& service) {
  if (!fabric) return nullptr;
  // Checked by OpenFabricManager already.
  auto timeout =
      serve::ParseDurationFlag(serve::kFabricManagerTimeoutFlag, flags.fabric_manager_timeout);
  if (!timeout) Die(timeout.error());
  fabricmanager::FabricHealthOptions options;
  options.connect = [address = flags.fabric_manager, library = flags.nvfm_library,
                     deadline = static_cast<unsigned>(timeout->count())] {
    return fabricmanager::ConnectNvfmAt(address, library, deadline);
  };
  options.table = fabric->table();
  options.interval = kFabricHealthInterval;
  // Failed NVLinks are faults of the GPUs they implicate, contained as any other.
  auto watch = std::make_unique<fabricmanager::FabricHealthWatch>(
      std::move(options), [&service](health::Signal signal) { service.OnGpuSignal(signal); });
  watch->Start();
  return watch;
}

}  // namespace tessera::serve_program
