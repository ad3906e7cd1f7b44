// MIG instances made at prepare and destroyed at unprepare (MIG by demand), through NVML:
// nvmlDeviceCreateGpuInstanceWithPlacement and one compute instance spanning it
// (nvml::Library::CreateGpuInstance), the MIG device's UUID from the MIG device handles, the
// capability nodes from procfs ("DeviceFileMinor:" of gpu<m>/mig/gi<g>/access and
// gi<g>/ci<c>/access; major "nvidia-caps" of /proc/devices).
#include "dra/mig_instances.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>

#include "common/bounded_file.h"
#include "inventory/parsers.h"

namespace tessera::dra {
namespace {

constexpr size_t kMaxProcFile = 4096;

Result<uint32_t> CapsMajor(const std::string& root) {
  std::string path = inventory::HostPath(root, "/proc/devices");
  auto text = ReadBoundedFile(path, 64 * 1024);
  if (!text) return text.error();
  auto majors = inventory::ParseProcDevices(*text);
  if (!majors) return majors.error().WithContext(path);
  auto it = majors->find("nvidia-caps");
  if (it == majors->end()) return NotFound(path + ": no nvidia-caps major");
  return it->second;
}

// The capability node of `access` (relative to the GPU's mig/ directory), created under the root
// when the driver has not (nvidia-modprobe -f makes it the same way: a character device,
// read-only to all).
Result<cdi::DeviceNode> CapabilityNode(const std::string& root, uint32_t gpu_minor,
                                       const std::string& access, uint32_t major) {
  std::string file = inventory::HostPath(
      root, "/proc/driver/nvidia/capabilities/gpu" + std::to_string(gpu_minor) + "/mig/" + access);
  auto text = ReadBoundedFile(file, kMaxProcFile);
  if (!text) return text.error();
  auto minor = inventory::ParseNvidiaCapabilityMinor(*text);
  if (!minor) return minor.error().WithContext(file);
  cdi::DeviceNode node;
  node.path = "/dev/nvidia-caps/nvidia-cap" + std::to_string(*minor);
  std::string host = inventory::HostPath(root, node.path);
  if (host != node.path) node.host_path = host;
  node.type = "c";
  node.major = major;
  node.minor = *minor;
  struct stat st;
  if (::stat(host.c_str(), &st) != 0) {
    std::string dir = inventory::HostPath(root, "/dev/nvidia-caps");
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return ErrnoError("mkdir " + dir, errno);
    if (::mknod(host.c_str(), S_IFCHR | 0444, makedev(major, *minor)) != 0 && errno != EEXIST)
      return ErrnoError("mknod " + host, errno);
  }
  return node;
}

// The GPU instance of `slot` that nobody holds: one an interrupted prepare made.
std::optional<uint32_t> Unclaimed(const std::vector<nvml::GpuInstance>& instances,
                                  const MigSlot& slot, const std::set<uint32_t>& owned) {
  for (const auto& gi : instances) {
    if (gi.profile_id == slot.profile_id &&
        gi.placement == nvml::Placement{slot.start, slot.size} && !owned.count(gi.id))
      return gi.id;
  }
  return std::nullopt;
}

// The made instance's UUID, CI and nodes.
Result<MigInstance> Describe(const nvml::Library& nvml, nvml::Gpu gpu, const NodeDevice& device,
                             uint32_t gi, const std::string& root) {
  auto migs = nvml.MigDevices(gpu);
  if (!migs) return migs.error();
  auto found = std::find_if(migs->begin(), migs->end(),
                            [&](const nvml::MigDevice& m) { return m.gpu_instance_id == gi; });
  if (found == migs->end()) {
    return NotFound("GPU instance " + std::to_string(gi) + " has no MIG device");
  }
  MigInstance instance{device.pci_address, gi, found->compute_instance_id, found->uuid, {}};
  if (!device.gpu_minor) return NotFound(device.pci_address + ": no /dev/nvidia<minor>");
  auto major = CapsMajor(root);
  if (!major) return major.error();
  std::string gi_dir = "gi" + std::to_string(gi);
  for (const std::string& access :
       {gi_dir + "/access",
        gi_dir + "/ci" + std::to_string(found->compute_instance_id) + "/access"}) {
    auto node = CapabilityNode(root, *device.gpu_minor, access, *major);
    if (!node) return node.error();
    instance.device_nodes.push_back(std::move(*node));
  }
  return instance;
}

}  // namespace

MigHooks NvmlMigHooks(std::shared_ptr<const nvml::Library> nvml, std::string root) {
  MigHooks hooks;
  hooks.create = [nvml, root](const NodeDevice& device,
                              const std::set<uint32_t>& owned) -> Result<MigInstance> {
    if (!device.mig_slot) return InvalidArgument(device.name + ": not a MIG placement");
    const MigSlot& slot = *device.mig_slot;
    auto gpu = nvml->GpuByPci(device.pci_address);
    if (!gpu) return gpu.error();
    auto instances = nvml->GpuInstances(*gpu);
    if (!instances) return instances.error();
    std::optional<uint32_t> gi = Unclaimed(*instances, slot, owned);
    const bool made = !gi;
    if (made) {
      auto created = nvml->CreateGpuInstance(*gpu, slot.profile_id, {slot.start, slot.size});
      if (!created) return created.error();
      gi = *created;
    }
    auto instance = Describe(*nvml, *gpu, device, *gi, root);
    if (!instance && made) (void)nvml->DestroyGpuInstance(*gpu, *gi);  // nothing half-made stays
    return instance;
  };
  hooks.find = [nvml](const MigIntent& intent,
                      const std::set<uint32_t>& owned) -> Result<std::optional<uint32_t>> {
    auto gpu = nvml->GpuByPci(intent.pci_address);
    if (!gpu) return gpu.error();
    auto instances = nvml->GpuInstances(*gpu);
    if (!instances) return instances.error();
    MigSlot slot;
    slot.profile_id = intent.profile_id;
    slot.start = intent.start;
    slot.size = intent.size;
    return Unclaimed(*instances, slot, owned);
  };
  hooks.destroy = [nvml](const MigInstance& instance) -> Status {
    auto gpu = nvml->GpuByPci(instance.pci_address);
    if (!gpu) return gpu.error();
    auto destroyed = nvml->DestroyGpuInstance(*gpu, instance.gpu_instance_id);
    // Gone already: an earlier try destroyed it, or the GPU was reset.
    if (!destroyed && destroyed.error().category == ErrorCategory::kNotFound) return Ok();
    return destroyed;
  };
  return hooks;
}

std::map<std::string, std::map<uint32_t, uint64_t>> ProfileMemory(
    const nvml::Library& nvml, const inventory::Inventory& inventory) {
  std::map<std::string, std::map<uint32_t, uint64_t>> out;
  for (const auto* gpu : inventory.Gpus()) {
    if (!gpu->mig || gpu->mig->enabled != true) continue;
    auto handle = nvml.GpuByPci(gpu->pci_address);
    if (!handle) continue;
    auto profiles = nvml.Profiles(*handle);
    if (!profiles) continue;
    for (const auto& profile : *profiles)
      out[gpu->pci_address][profile.id] = profile.memory_mb << 20;
  }
  return out;
}

}  // namespace tessera::dra
