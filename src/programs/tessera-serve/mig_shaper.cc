// MIG by demand on this host: NVML makes and destroys the instances; after each change the
// host is read again (the inventory's MIG reading), the new instances' capability device nodes
// are made under --root when missing (as nvidia-modprobe -f does) and the CDI specs are written
// again, so the new MIG device can be given to a container.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "common/bounded_file.h"
#include "wiring.h"

namespace tessera::serve_program {
namespace {

constexpr size_t kMaxProfileTableBytes = 64 * 1024;

std::string PciDeviceId(const inventory::PciDevice& gpu) {
  char text[16];
  std::snprintf(text, sizeof text, "%04x:%04x", gpu.vendor_id, gpu.device_id);
  return text;
}

// A capability node the driver's procfs names and /dev lacks (mode 0444, as the driver's
// DeviceFileMode for MIG capabilities). Answers whether one was made.
bool MakeCapNode(const std::string& root, const std::optional<inventory::DeviceNode>& node) {
  if (!node || node->exists || node->major == 0) return false;
  const std::string dir = root + "/dev/nvidia-caps";
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  const std::string path = root + node->path;
  if (::mknod(path.c_str(), S_IFCHR | 0444, makedev(node->major, node->minor)) != 0 &&
      errno != EEXIST) {
    spdlog::warn("MIG: {}: cannot be made: {}", path, std::strerror(errno));
    return false;
  }
  spdlog::info("MIG: {} made (nvidia-caps {}:{})", path, node->major, node->minor);
  return true;
}

class HostShaper final : public serve::MigShaper {
 public:
  HostShaper(const ServeFlags& flags, std::string root, std::string nvml_library,
             std::unique_ptr<nvml::Library> nvml, std::map<std::string, mig::ProfileTable> tables)
      : flags_(flags),
        root_(std::move(root)),
        nvml_library_(std::move(nvml_library)),
        nvml_(std::move(nvml)),
        tables_(std::move(tables)) {}

  const mig::ProfileTable* TableOf(const std::string& pci_address) const override {
    auto it = tables_.find(pci_address);
    return it == tables_.end() ? nullptr : &it->second;
  }

  Result<std::vector<mig::LiveInstance>> Instances(const std::string& pci_address) override {
    std::lock_guard lock(mu_);
    auto gpu = nvml_->GpuByPci(pci_address);
    if (!gpu) return gpu.error();
    auto instances = nvml_->GpuInstances(*gpu);
    if (!instances) return instances.error();
    std::vector<mig::LiveInstance> out;
    for (const auto& instance : *instances)
      out.push_back({instance.id, instance.profile_id, instance.placement, false});
    return out;
  }

  Outcome Apply(const std::string& pci_address, const mig::ShapeStep& step) override {
    Outcome out;
    {
      std::lock_guard lock(mu_);
      auto gpu = nvml_->GpuByPci(pci_address);
      if (!gpu) {
        out.status = gpu.error();
        return out;
      }
      for (uint32_t id : step.destroy) {
        if (auto destroyed = nvml_->DestroyGpuInstance(*gpu, id); !destroyed) {
          // In use (a process the service does not know of): nothing else of the step happens.
          out.status = destroyed.error().WithContext("destroy GPU instance " + std::to_string(id));
          out.refused = id;
          break;
        }
      }
      if (out.status) {
        auto created =
            nvml_->CreateGpuInstance(*gpu, step.create.profile_id, step.create.placement);
        if (created)
          out.created = *created;
        else
          out.status = created.error().WithContext("create " + step.create.profile);
      }
    }
    Refresh(pci_address, out);
    return out;
  }

 private:
  Result<inventory::Inventory> ReadHost() const {
    inventory::ReadOptions read;
    read.root = root_;
    read.nvml_library = nvml_library_;
    return inventory::ReadInventory(read);
  }

  // The GPU's MIG devices as the host has them now; their nodes made, the CDI specs rewritten.
  void Refresh(const std::string& pci_address, Outcome& out) {
    auto inv = ReadHost();
    bool made = false;
    for (const auto* gpu : inv ? inv->Gpus() : std::vector<const inventory::PciDevice*>{})
      if (gpu->pci_address == pci_address) made |= MakeMigCapNodes(root_, *gpu);
    if (made) inv = ReadHost();
    if (!inv) {
      if (out.status) out.status = inv.error().WithContext("reading the host again");
      return;
    }
    auto names = WriteHostCdiSpecs(flags_, *inv);
    if (!names) {
      if (out.status) out.status = names.error();
      return;
    }
    int index = 0;
    for (const auto* gpu : inv->Gpus()) {
      if (gpu->pci_address == pci_address) {
        fleet::GpuRecord record;
        AddMigSlices(*gpu, index, flags_.cdi_kind, *names, record);
        out.slices = std::move(record.mig_slices);
        for (const auto& device :
             gpu->mig ? gpu->mig->devices : std::vector<inventory::MigDevice>{})
          if (out.created && device.gpu_instance_id == *out.created) out.created_uuid = device.uuid;
      }
      ++index;
    }
    auto instances = Instances(pci_address);
    if (instances) out.instances = std::move(*instances);
  }

  const ServeFlags flags_;
  const std::string root_;
  const std::string nvml_library_;
  std::mutex mu_;  // NVML calls of this handle
  std::unique_ptr<nvml::Library> nvml_;
  const std::map<std::string, mig::ProfileTable> tables_;  // by PCI address
};

}  // namespace

bool MakeMigCapNodes(const std::string& root, const inventory::PciDevice& gpu) {
  bool made = false;
  if (gpu.mig)
    for (const auto& device : gpu.mig->devices) {
      made |= MakeCapNode(root, device.gpu_instance_node);
      made |= MakeCapNode(root, device.compute_instance_node);
    }
  return made;
}

std::shared_ptr<serve::MigShaper> HostMigShaper(const ServeFlags& flags, const HostGpus& host) {
  if (flags.mig_by_demand == "off" || host.fleet_mode || host.nvml_library.empty()) return nullptr;
  std::vector<mig::ProfileTable> known;
  for (const auto& path : flags.mig_profiles) {
    auto text = ReadBoundedFile(path, kMaxProfileTableBytes);
    auto table = text ? mig::ParseProfileTable(*text) : Result<mig::ProfileTable>(text.error());
    if (!table) Die(table.error().WithContext("--mig-profiles " + path));
    known.push_back(std::move(*table));
  }
  known.push_back(mig::BuiltinH100Table());
  std::map<std::string, mig::ProfileTable> tables;
  for (const auto* gpu : host.inventory.Gpus()) {
    if (!gpu->mig || !gpu->mig->enabled.value_or(false)) continue;
    const mig::ProfileTable* table = mig::TableForDevice(known, PciDeviceId(*gpu));
    if (!table) {
      spdlog::info("MIG by demand: GPU {} ({}): no profile table, its instances stay as they are",
                   gpu->pci_address, PciDeviceId(*gpu));
      continue;
    }
    tables[gpu->pci_address] = *table;
  }
  if (tables.empty()) return nullptr;
  auto nvml = nvml::Library::Open(host.nvml_library);
  if (!nvml) {
    spdlog::warn("MIG by demand is off: {}", nvml.error().message);
    return nullptr;
  }
  spdlog::info("MIG by demand: instances on {} GPU(s)", tables.size());
  return std::make_shared<HostShaper>(flags, host.root, host.nvml_library, std::move(*nvml),
                                      std::move(tables));
}

}  // namespace tessera::serve_program
