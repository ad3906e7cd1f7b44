// This host's GPUs: the inventory of --root, a CDI spec for them under --cdi-dir, their
// records as the service places them (MIG slices, memory for shares) and their topology.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "cdi/cdi.h"
#include "nvml/nvml.h"
#include "placement/placement.h"
#include "serve/flag_paths.h"
#include "topology/topology.h"
#include "wiring.h"

namespace tessera::serve_program {

// A GPU in MIG mode: its MIG devices as slices the service hands out, named as the CDI spec
// names them (the UUID, else "<GPU index>:<MIG index>").
void AddMigSlices(const inventory::PciDevice& gpu, int index, const std::string& cdi_kind,
                  const std::set<std::string>& cdi_names, fleet::GpuRecord& record) {
  if (!gpu.mig) return;
  // Instances exist only in MIG mode: without NVML's answer, procfs listing some says enough.
  record.mig_enabled = gpu.mig->enabled.value_or(!gpu.mig->devices.empty());
  if (!record.mig_enabled) return;
  record.compute_slices = placement::MigBoardComputeSlices(gpu.device_id);
  for (const auto& device : gpu.mig->devices) {
    fleet::MigSlice slice;
    slice.id = !device.uuid.empty()
                   ? device.uuid
                   : gpu.pci_address + "/gi" + std::to_string(device.gpu_instance_id) + "/ci" +
                         std::to_string(device.compute_instance_id);
    slice.profile = device.profile;
    slice.gpu_instance_id = device.gpu_instance_id;
    slice.memory_bytes = device.memory_bytes;
    slice.compute_slices = placement::MigProfileComputeSlices(device.profile);
    const std::string name = !device.uuid.empty()
                                 ? device.uuid
                                 : std::to_string(index) + ":" + std::to_string(device.index);
    slice.cdi_device = cdi_kind + "=" + name;
    if (device.profile.empty())
      spdlog::warn("GPU {}: MIG device {} has no profile (NVML not available); it is not placed",
                   gpu.pci_address, slice.id);
    else if (!cdi_names.count(name))
      spdlog::warn("GPU {}: no CDI device {} in kind {}; containers cannot get MIG device {}",
                   gpu.pci_address, name, cdi_kind, slice.id);
    record.mig_slices.push_back(std::move(slice));
  }
}

namespace {

// Each GPU's memory from NVML, what share placement counts against; a GPU whose memory NVML
// cannot tell is never shared.
void ReadGpuMemory(const std::string& nvml_library, std::vector<fleet::GpuRecord>& gpus) {
  if (gpus.empty() || nvml_library.empty()) return;
  auto nvml = nvml::Library::Open(nvml_library);
  if (!nvml) {
    spdlog::info("shares: no GPU can be shared: {}", nvml.error().message);
    return;
  }
  for (auto& gpu : gpus) {
    if (gpu.mig_enabled) continue;
    auto handle = (*nvml)->GpuByPci(gpu.pci_address);
    auto memory = handle ? (*nvml)->MemoryTotal(*handle) : Result<uint64_t>(handle.error());
    if (!memory) {
      spdlog::warn("GPU {}: cannot be shared: {}", gpu.pci_address, memory.error().message);
      continue;
    }
    gpu.memory_bytes = *memory;
  }
}

// The kind of the NVSwitch spec that goes with a GPU kind: the default pair, or "<kind>-nvswitch"
// so a service with its own GPU kind never overwrites another's NVSwitch spec.
std::string NvSwitchKind(const std::string& gpu_kind) {
  if (gpu_kind == "nvidia.com/gpu") return "nvidia.com/nvswitch";
  return gpu_kind + "-nvswitch";
}

// The CDI specs of the host's GPUs under --cdi-dir; the names of the devices of --cdi-kind.
std::set<std::string> WriteCdiSpecs(const ServeFlags& flags, const inventory::Inventory& inv) {
  auto written = WriteHostCdiSpecs(flags, inv);
  if (!written) Die(written.error());
  return std::move(*written);
}

// Each GPU as the service records it, named as the CDI spec names it.
std::vector<fleet::GpuRecord> GpuRecords(const inventory::Inventory& inv,
                                         const std::string& cdi_kind,
                                         const std::set<std::string>& cdi_names) {
  std::vector<fleet::GpuRecord> out;
  int index = 0;
  for (const auto* gpu : inv.Gpus()) {
    fleet::GpuRecord record;
    record.pci_address = gpu->pci_address;
    record.index = index++;
    record.model = gpu->model;
    // The stable CDI name (UUID, else PCI address) survives re-enumeration, unlike the index.
    std::string name = gpu->gpu_uuid.value_or(gpu->pci_address);
    if (!cdi_names.count(name)) {
      spdlog::warn("GPU {}: no CDI device {} in kind {}; containers cannot get it",
                   gpu->pci_address, name, cdi_kind);
    }
    record.cdi_device = cdi_kind + "=" + name;
    record.uuid = gpu->gpu_uuid.value_or("");
    AddMigSlices(*gpu, record.index, cdi_kind, cdi_names, record);
    out.push_back(std::move(record));
  }
  return out;
}

}  // namespace

Result<std::set<std::string>> WriteHostCdiSpecs(const ServeFlags& flags,
                                                const inventory::Inventory& inv) {
  cdi::BuildOptions build;
  build.mode = cdi::Mode::kAuto;
  build.gpu_kind = flags.cdi_kind;
  build.nvswitch_kind = NvSwitchKind(flags.cdi_kind);
  std::set<std::string> cdi_names;
  if (inv.Gpus().empty()) return cdi_names;
  auto built = cdi::BuildSpecs(inv, build);
  if (!built) return built.error().WithContext("CDI");
  for (const auto& warning : built->warnings)
    spdlog::warn("cdi: {}", warning);
  for (const auto& spec : built->specs) {
    std::string path = flags.cdi_dir + "/" + cdi::SpecFileName(spec, cdi::Format::kJson);
    auto written = cdi::WriteSpecFile(path, cdi::Serialize(spec, cdi::Format::kJson));
    if (!written) return written.error().WithContext("CDI spec");
    spdlog::info("cdi: {} ({}, {} devices)", path, spec.kind, spec.devices.size());
    if (spec.kind == flags.cdi_kind)
      for (const auto& device : spec.devices)
        cdi_names.insert(device.name);
  }
  return cdi_names;
}

HostGpus ReadHostGpus(const ServeFlags& flags) {
  HostGpus out;
  // With the Kubernetes backend the GPUs are the nodes' (their tessera.dev/gpus annotations),
  // not this host's.
  out.fleet_mode = flags.backend == "kubernetes";
  out.root = Absolute(flags.root);
  inventory::ReadOptions read;
  read.root = out.root;
  read.nvml_library = flags.nvml ? *flags.nvml : inventory::DefaultNvmlLibrary(out.root);
  out.nvml_library = read.nvml_library;
  auto inv = out.fleet_mode ? Result<inventory::Inventory>(inventory::Inventory{})
                            : inventory::ReadInventory(read);
  if (!inv) Die(inv.error().WithContext("inventory of " + out.root));
  // MIG by demand: instances made before a restart may lack their device nodes (a kill between
  // the create and the nodes); they are made now, before the CDI specs name them.
  if (!out.fleet_mode && flags.mig_by_demand != "off") {
    bool made = false;
    for (const auto* gpu : inv->Gpus())
      made |= MakeMigCapNodes(out.root, *gpu);
    if (made) inv = inventory::ReadInventory(read);
    if (!inv) Die(inv.error().WithContext("inventory of " + out.root));
  }
  for (const auto& warning : inv->warnings)
    spdlog::warn("inventory: {}", warning);
  out.inventory = std::move(*inv);

  const auto cdi_names = WriteCdiSpecs(flags, out.inventory);
  out.host.gpus = GpuRecords(out.inventory, flags.cdi_kind, cdi_names);
  ReadGpuMemory(out.nvml_library, out.host.gpus);
  // Shares can be placed here: an MPS one needs the control daemon, looked for by its default name.
  if (flags.mps_control == ServeFlags{}.mps_control &&
      std::any_of(out.host.gpus.begin(), out.host.gpus.end(),
                  [](auto& gpu) { return gpu.memory_bytes; }))
    if (auto found = serve::CheckProgram("--mps-control", flags.mps_control); !found)
      spdlog::warn("{}: MPS shares cannot start here (time-sliced ones can)",
                   found.error().message);
  if (!out.host.gpus.empty()) {
    auto topology = topology::TopologyFromInventory(out.inventory);
    if (!topology) Die(topology.error().WithContext("topology"));
    out.host.topology = std::move(*topology);
  }
  return out;
}

}  // namespace tessera::serve_program
