// gen-device-mounts: from a snapshot and a selection of adapters to ctr/nerdctl/docker flags.
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

#include "windows/text.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace {

using text::Lower;

std::string Label(const Snapshot& s, const Adapter* a) {
  int index = static_cast<int>(a - s.adapters.data());
  return "adapter " + std::to_string(index) + " (" + a->description + ", luid " +
         FormatLuid(a->luid) + ")";
}

Result<std::vector<const Adapter*>> Select(const Snapshot& s, const AdapterSelection& sel) {
  int kinds = (sel.all ? 1 : 0) + (sel.indexes.empty() ? 0 : 1) + (sel.luids.empty() ? 0 : 1) +
              (sel.location_paths.empty() ? 0 : 1);
  if (kinds != 1) {
    return InvalidArgument("select adapters with exactly one of --all, --index, --luid, --path");
  }
  std::set<size_t> chosen;
  if (sel.all) {
    for (size_t i = 0; i < s.adapters.size(); ++i)
      chosen.insert(i);
  }
  for (int index : sel.indexes) {
    if (index < 0 || static_cast<size_t>(index) >= s.adapters.size()) {
      return NotFound("no adapter with index " + std::to_string(index) + " (the snapshot has " +
                      std::to_string(s.adapters.size()) + ")");
    }
    chosen.insert(static_cast<size_t>(index));
  }
  for (uint64_t luid : sel.luids) {
    auto it = std::find_if(s.adapters.begin(), s.adapters.end(),
                           [&](const Adapter& a) { return a.luid == luid; });
    if (it == s.adapters.end()) {
      return NotFound("no adapter with LUID " + FormatLuid(luid) +
                      " (LUIDs change at every boot: take a fresh snapshot)");
    }
    chosen.insert(static_cast<size_t>(it - s.adapters.begin()));
  }
  for (const std::string& path : sel.location_paths) {
    auto it = std::find_if(s.adapters.begin(), s.adapters.end(), [&](const Adapter& a) {
      return std::any_of(a.location_paths.begin(), a.location_paths.end(),
                         [&](const std::string& p) { return Lower(p) == Lower(path); });
    });
    if (it == s.adapters.end()) return NotFound("no adapter with location path \"" + path + "\"");
    chosen.insert(static_cast<size_t>(it - s.adapters.begin()));
  }
  if (chosen.empty()) return NotFound("the snapshot lists no DirectX adapters");
  std::vector<const Adapter*> out;
  for (size_t i : chosen)
    out.push_back(&s.adapters[i]);
  return out;
}

}  // namespace

Result<MountFormat> ParseMountFormat(const std::string& text) {
  if (text == "ctr") return MountFormat::kCtr;
  if (text == "nerdctl") return MountFormat::kNerdctl;
  if (text == "docker") return MountFormat::kDocker;
  if (text == "json") return MountFormat::kJson;
  return InvalidArgument("format \"" + text + "\" is not ctr, nerdctl, docker or json");
}

bool ShowsEveryGpuToContainers(uint32_t build, uint32_t ubr) {
  // No cumulative update of Windows Server 2022 is known to fix it; a fixed UBR goes here.
  (void)ubr;
  return build == 20348;
}

Result<MountsPlan> PlanMounts(const Snapshot& s, const MountsOptions& options) {
  auto selected = Select(s, options.selection);
  if (!selected.ok()) return selected.error();
  MountsPlan plan;
  const DeviceRef display_class{DeviceIdType::kClass, kDisplayAdapterClassGuid};

  if (options.format == MountFormat::kDocker) {
    plan.adapters = *selected;
    plan.devices.push_back(display_class);
    plan.arguments = {"--isolation", "process", "--device",
                      std::string("class/") + kDisplayAdapterClassGuid};
    plan.diagnostics.push_back(
        "warning: docker talks HCS v1, which can neither assign one device instance nor bind "
        "single files: every GPU on the host becomes visible to the container, and APIs other "
        "than DirectX (CUDA, OpenCL, Vulkan, NVML) will lack their DLLs; use ctr or nerdctl for "
        "a chosen GPU with its runtime files");
    if (!options.selection.all) {
      plan.diagnostics.push_back("warning: the adapter selection cannot be honoured with docker");
    }
  } else {
    bool by_location = s.MaxSchemaVersion() >= SchemaVersion{2, 2};
    for (const Adapter* a : *selected) {
      std::string path = a->PciLocationPath();
      if (path.empty()) {
        if (!options.selection.all) {
          return FailedPrecondition(Label(s, a) +
                                    " has no PCI location path, so it cannot be assigned alone");
        }
        plan.diagnostics.push_back("warning: skipping " + Label(s, a) + ": no PCI location path");
        continue;
      }
      plan.adapters.push_back(a);
      if (by_location) plan.devices.push_back({DeviceIdType::kVpciLocationPath, path});
    }
    if (plan.adapters.empty()) {
      return FailedPrecondition("none of the selected adapters has a PCI location path");
    }
    if (!by_location) {
      plan.devices.push_back(display_class);
      plan.diagnostics.push_back(
          "warning: this host's HCS schema is " + FormatSchemaVersion(s.MaxSchemaVersion()) +
          "; assigning a device by location path needs 2.2 (Windows Server 2019 has 2.1), so the "
          "display adapter class is used and every GPU becomes visible to the container");
    }
    plan.files = PlanRuntimeFiles(plan.adapters, options.vendor_files);
    for (const std::string& p : plan.files.problems) {
      plan.diagnostics.push_back("warning: skipped runtime file: " + p);
    }
    for (const DeviceRef& d : plan.devices) {
      plan.arguments.push_back("--device");
      plan.arguments.push_back(FormatDeviceString(d));
    }
    for (const FileMount& m : plan.files.mounts) {
      plan.arguments.push_back("--mount");
      if (options.format == MountFormat::kNerdctl) {
        // nerdctl parses docker's --mount syntax.
        plan.arguments.push_back("type=bind,src=" + m.source + ",dst=" + m.destination +
                                 (m.read_only ? ",readonly" : ""));
      } else {
        // ctr's syntax; rbind:ro keeps the driver's files read-only inside the container.
        plan.arguments.push_back("type=bind,src=" + m.source + ",dst=" + m.destination +
                                 ",options=rbind:" + (m.read_only ? "ro" : "rw"));
      }
    }
  }
  // Only adapters on a PCI bus count: indirect display adapters (RDP, virtual displays) are not
  // GPUs a container could be shown.
  size_t gpus =
      static_cast<size_t>(std::count_if(s.adapters.begin(), s.adapters.end(), [](const Adapter& a) {
        return !a.PciLocationPath().empty();
      }));
  if (gpus > 1 && ShowsEveryGpuToContainers(s.os.build, s.os.ubr)) {
    plan.diagnostics.push_back(
        "warning: this host has " + std::to_string(gpus) + " GPUs and runs Windows build " +
        std::to_string(s.os.build) + "." + std::to_string(s.os.ubr) +
        " (Windows Server 2022), which shows every GPU to a container that is given one "
        "(known Windows bug): the selection is not isolation");
  }
  return plan;
}

std::string MountsPlanJson(const Snapshot& s, const MountsPlan& plan) {
  using ojson = nlohmann::ordered_json;
  ojson out = ojson::object();
  out["host"] = ojson{{"hostname", s.hostname},
                      {"build", s.os.build},
                      {"ubr", s.os.ubr},
                      {"hcs_schema", FormatSchemaVersion(s.MaxSchemaVersion())}};
  ojson adapters = ojson::array();
  for (const Adapter* a : plan.adapters) {
    std::string path = a->PciLocationPath();
    adapters.push_back(ojson{{"index", a - s.adapters.data()},
                             {"luid", FormatLuid(a->luid)},
                             {"description", a->description},
                             {"location_path", path.empty() ? ojson(nullptr) : ojson(path)}});
  }
  out["adapters"] = adapters;
  ojson devices = ojson::array();
  for (const DeviceRef& d : plan.devices) {
    ojson entry{{"id", d.id}, {"idType", DeviceIdTypeName(d.type)}};
    auto hcs = HcsDeviceJson(d, s.MaxSchemaVersion(), Isolation::kProcess);
    entry["hcs_device"] = hcs.ok() ? ojson::parse(*hcs) : ojson(nullptr);
    devices.push_back(entry);
  }
  out["devices"] = devices;
  ojson mounts = ojson::array();
  for (const FileMount& m : plan.files.mounts) {
    mounts.push_back(ojson{{"source", m.source},
                           {"destination", m.destination},
                           {"read_only", m.read_only},
                           {"origin", m.origin}});
  }
  out["mounts"] = mounts;
  out["diagnostics"] = plan.diagnostics;
  return out.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

Result<std::vector<std::string>> RunCommand(MountFormat format, const MountsPlan& plan,
                                            const std::string& image,
                                            const std::vector<std::string>& command,
                                            const std::string& container_id) {
  std::vector<std::string> argv;
  switch (format) {
    case MountFormat::kCtr:
      argv = {"ctr", "run", "--rm"};
      break;
    case MountFormat::kNerdctl:
      argv = {"nerdctl", "run", "--rm"};
      break;
    case MountFormat::kDocker:
      argv = {"docker", "run", "--rm"};
      break;
    case MountFormat::kJson:
      return InvalidArgument("--run needs --format ctr, nerdctl or docker");
  }
  if (image.empty()) return InvalidArgument("--run needs an image");
  argv.insert(argv.end(), plan.arguments.begin(), plan.arguments.end());
  argv.push_back(image);
  if (format == MountFormat::kCtr) argv.push_back(container_id);  // ctr run IMAGE ID [CMD...]
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace tessera::windows
