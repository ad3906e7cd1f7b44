// MIG devices of NVIDIA GPUs. procfs gives each instance's capability minors (and so its device
// nodes); NVML gives everything else: whether MIG is on, profiles with placements, UUIDs,
// memory and SM counts. Either source alone gives a partial picture, named in a warning.
#include <algorithm>

#include "inventory/parsers.h"
#include "inventory/readers.h"
#include "nvml/nvml.h"

namespace tessera::inventory {
namespace {

constexpr size_t kMaxCapabilityEntries = 256;  // per directory; H100 has 7 GIs × 7 CIs at most

std::vector<MigCapabilityFile> ReadCapabilityFiles(const HostRoot& host, const std::string& dir,
                                                   std::vector<std::string>& warnings) {
  std::vector<MigCapabilityFile> files;
  auto gis = host.ListDirectory(dir);
  if (!gis) return files;  // no MIG directory: no MIG instances on this GPU
  auto read = [&](const std::string& relative) {
    auto text = host.ReadFile(dir + "/" + relative, 4096);
    if (!text) {
      warnings.push_back(text.error().message);
      return;
    }
    files.push_back({relative, std::move(*text)});
  };
  size_t seen = 0;
  for (const std::string& gi : *gis) {
    if (++seen > kMaxCapabilityEntries) break;
    if (!ParseMigInstanceName(gi, "gi")) continue;
    read(gi + "/access");
    auto cis = host.ListDirectory(dir + "/" + gi);
    if (!cis) continue;
    size_t seen_ci = 0;
    for (const std::string& ci : *cis) {
      if (++seen_ci > kMaxCapabilityEntries) break;
      if (ParseMigInstanceName(ci, "ci")) read(gi + "/" + ci + "/access");
    }
  }
  return files;
}

DeviceNode CapNode(const HostRoot& host, uint32_t major, uint32_t minor) {
  DeviceNode node;
  node.path = "/dev/nvidia-caps/nvidia-cap" + std::to_string(minor);
  node.major = major;
  node.minor = minor;
  node.exists = host.Exists(node.path);
  return node;
}

std::optional<uint32_t> CapsMajor(const HostRoot& host) {
  auto text = host.ReadFile("/proc/devices");
  if (!text) return std::nullopt;
  auto majors = ParseProcDevices(*text);
  if (!majors) return std::nullopt;
  auto it = majors->find("nvidia-caps");
  if (it == majors->end()) return std::nullopt;
  return it->second;
}

// Joins NVML's view of one GPU into `state`: MIG devices by (GI, CI), with their GI's profile.
Status ReadFromNvml(const nvml::Library& library, const PciDevice& gpu, MigState& state,
                    std::vector<std::string>& warnings, bool& supported) {
  auto handle = library.GpuByPci(gpu.pci_address);
  if (!handle) return handle.error();
  auto mode = library.GetMigMode(*handle);
  if (!mode) return mode.error();
  supported = mode->has_value();
  if (!supported) return Ok();
  state.enabled = (*mode)->current;
  state.pending = (*mode)->pending;
  if (!(*mode)->current) return Ok();
  auto profiles = library.Profiles(*handle);
  if (!profiles) return profiles.error();
  auto instances = library.GpuInstances(*handle);
  if (!instances) return instances.error();
  auto devices = library.MigDevices(*handle);
  if (!devices) return devices.error();
  for (const nvml::MigDevice& found : *devices) {
    auto it = std::find_if(state.devices.begin(), state.devices.end(), [&](const MigDevice& d) {
      return d.gpu_instance_id == found.gpu_instance_id &&
             d.compute_instance_id == found.compute_instance_id;
    });
    if (it == state.devices.end()) {
      warnings.push_back("MIG device GI " + std::to_string(found.gpu_instance_id) + " CI " +
                         std::to_string(found.compute_instance_id) +
                         ": no capability file in /proc/driver/nvidia/capabilities; device "
                         "nodes unknown");
      state.devices.push_back({});
      it = std::prev(state.devices.end());
      it->gpu_instance_id = found.gpu_instance_id;
      it->compute_instance_id = found.compute_instance_id;
    }
    it->index = found.index;
    it->uuid = found.uuid;
    it->memory_bytes = found.memory_bytes;
    it->multiprocessors = found.multiprocessors;
    auto instance =
        std::find_if(instances->begin(), instances->end(),
                     [&](const nvml::GpuInstance& gi) { return gi.id == found.gpu_instance_id; });
    if (instance == instances->end()) continue;
    it->profile_id = instance->profile_id;
    it->placement = MigPlacement{instance->placement.start, instance->placement.size};
    auto profile = std::find_if(
        profiles->begin(), profiles->end(),
        [&](const nvml::GpuInstanceProfile& p) { return p.id == instance->profile_id; });
    if (profile == profiles->end()) continue;
    it->profile = profile->name;
    // A compute instance smaller than its GPU instance is named as nvidia-smi does: "1c.3g.40gb".
    if (found.compute_instance_slices != 0 &&
        found.compute_instance_slices < found.gpu_instance_slices) {
      it->profile = std::to_string(found.compute_instance_slices) + "c." + it->profile;
    }
  }
  return Ok();
}

// Facts of the whole board NVML gives without changing anything: its memory and module ID. Not
// every driver or board has them, so a missing one is left out without a warning.
void ReadBoardFromNvml(const nvml::Library& library, PciDevice& gpu) {
  auto handle = library.GpuByPci(gpu.pci_address);
  if (!handle) return;
  if (auto memory = library.MemoryTotal(*handle)) gpu.memory_bytes = *memory;
  if (auto module = library.ModuleId(*handle); module && *module) gpu.module_id = **module;
}

}  // namespace

bool MigCapableBoard(uint16_t device_id) {
  // NVIDIA device ID ranges of the chips with MIG: GA100 (A100, A30, A800), GH100 and GH200
  // (H100, H200, H800, H20), GB100 (B200). A range takes in a few boards without MIG, which only
  // costs them an NVML start; a board missing here still gets NVML once procfs lists a MIG
  // instance on it.
  struct Range {
    uint16_t first, last;
  };
  constexpr Range kMigChips[] = {{0x20b0, 0x20ff}, {0x2300, 0x234f}, {0x2900, 0x29ff}};
  for (const Range& range : kMigChips) {
    if (device_id >= range.first && device_id <= range.last) return true;
  }
  return false;
}

void AttachMig(const HostRoot& host, Inventory& inventory, const std::string& nvml_library) {
  std::optional<uint32_t> caps_major;
  bool caps_major_read = false;
  std::unique_ptr<nvml::Library> library;
  std::optional<std::string> nvml_problem;
  bool nvml_tried = false;

  for (PciDevice& gpu : inventory.devices) {
    if (gpu.driver != "nvidia" || gpu.kind != DeviceKind::kGpu || !gpu.nvidia_minor) continue;
    MigState state;
    std::string dir =
        "/proc/driver/nvidia/capabilities/gpu" + std::to_string(*gpu.nvidia_minor) + "/mig";
    auto files = ReadCapabilityFiles(host, dir, gpu.warnings);
    std::vector<std::string> parse_warnings;
    auto minors = ParseMigCapabilities(files, parse_warnings);
    for (auto& warning : parse_warnings)
      gpu.warnings.push_back(dir.substr(0, dir.size() - 3) + warning);
    if (!minors.empty() && !caps_major_read) {
      caps_major = CapsMajor(host);
      caps_major_read = true;
    }
    uint32_t position = 0;
    for (const MigCapabilityMinors& entry : minors) {
      MigDevice device;
      device.index = position++;
      device.gpu_instance_id = entry.gpu_instance_id;
      device.compute_instance_id = entry.compute_instance_id;
      if (caps_major) {
        device.gpu_instance_node = CapNode(host, *caps_major, entry.gpu_instance_minor);
        device.compute_instance_node = CapNode(host, *caps_major, entry.compute_instance_minor);
      }
      state.devices.push_back(std::move(device));
    }
    if (!minors.empty() && !caps_major) {
      gpu.warnings.push_back("/proc/devices: no nvidia-caps major; MIG device nodes left out");
    }

    bool supported = false;
    // Not the mig directory's presence: the driver creates capabilities/gpu<minor>/mig for
    // every GPU it attaches, MIG or not (open-gpu-kernel-modules, os.c osRmCapRegisterGpu).
    const bool may_have_mig = !files.empty() || MigCapableBoard(gpu.device_id);
    if (!nvml_library.empty() && may_have_mig) {
      if (!nvml_tried) {
        nvml_tried = true;
        auto opened = nvml::Library::Open(nvml_library);
        if (opened) {
          library = std::move(*opened);
        } else {
          nvml_problem = opened.error().message;
        }
      }
      if (library) {
        ReadBoardFromNvml(*library, gpu);
        auto read = ReadFromNvml(*library, gpu, state, gpu.warnings, supported);
        if (!read) {
          gpu.warnings.push_back("NVML: " + read.error().message +
                                 "; MIG mode, profiles, UUIDs, memory and SM counts not reported");
        }
      }
    }
    if (!supported && state.devices.empty()) continue;  // not MIG-capable, or unknown and unused
    if (!library && !state.devices.empty()) {
      gpu.warnings.push_back(
          "NVML " +
          (nvml_library.empty() ? std::string("not consulted")
                                : "unavailable (" + *nvml_problem + ")") +
          ": MIG mode, profiles, placements, UUIDs, memory and SM counts not reported");
    }
    std::sort(state.devices.begin(), state.devices.end(),
              [](const MigDevice& a, const MigDevice& b) {
                return std::pair(a.gpu_instance_id, a.compute_instance_id) <
                       std::pair(b.gpu_instance_id, b.compute_instance_id);
              });
    gpu.mig = std::move(state);
  }
}

}  // namespace tessera::inventory
