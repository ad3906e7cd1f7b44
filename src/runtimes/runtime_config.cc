// `tessera runtime-config`: the containerd and podman configuration each isolation runtime
// needs for GPUs. Facts from the containerd, gVisor and Kata documentation:
//  - containerd 1.7 only injects CDI devices with `enable_cdi = true` (default from 2.0);
//  - gVisor's shim is `io.containerd.runsc.v1`; `io.containerd.runc.v2` pointed at runsc hangs
//    container start; nvproxy is switched on in the runsc.toml named by ConfigPath;
//  - Kata's GPU shim is `io.containerd.kata-qemu-nvidia-gpu.v2` and reads per-pod VM sizing
//    from `io.katacontainers.*` annotations, which containerd drops unless listed.
#include <sstream>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

constexpr const char* kCri = R"(plugins."io.containerd.grpc.v1.cri")";

std::string TomlStringArray(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += "\"" + items[i] + "\"";
  }
  return out + "]";
}

}  // namespace

Result<Runtime> ParseRuntime(std::string_view name) {
  if (name == "runc") return Runtime::kRunc;
  if (name == "gvisor" || name == "runsc") return Runtime::kGvisor;
  if (name == "kata") return Runtime::kKata;
  return InvalidArgument("runtime \"" + std::string(name) + "\": expected runc, gvisor or kata");
}

const char* RuntimeName(Runtime runtime) {
  switch (runtime) {
    case Runtime::kRunc:
      return "runc";
    case Runtime::kGvisor:
      return "gvisor";
    case Runtime::kKata:
      return "kata";
  }
  return "?";
}

std::string ContainerdConfig(const ContainerdConfigOptions& options) {
  std::ostringstream out;
  out << "# containerd config (version 2, containerd 1.7): add to /etc/containerd/config.toml\n"
      << "version = 2\n\n"
      << "# CDI: containerd 1.7 injects CDI devices (what the device plugin returns) only with\n"
      << "# enable_cdi; containerd 2.0 enables it by default.\n"
      << "[" << kCri << "]\n"
      << "  enable_cdi = true\n"
      << "  cdi_spec_dirs = " << TomlStringArray(options.cdi_spec_dirs) << "\n\n";
  switch (options.runtime) {
    case Runtime::kRunc:
      out << "[" << kCri << ".containerd.runtimes.runc]\n"
          << "  runtime_type = \"io.containerd.runc.v2\"\n\n"
          << "[" << kCri << ".containerd.runtimes.runc.options]\n"
          << "  SystemdCgroup = true\n";
      break;
    case Runtime::kGvisor:
      out << "# RuntimeClass \"gvisor\" (handler runsc). The shim type must be runsc.v1: runc.v2\n"
          << "# with runsc options makes containers hang on start.\n"
          << "[" << kCri << ".containerd.runtimes.runsc]\n"
          << "  runtime_type = \"io.containerd.runsc.v1\"\n\n"
          << "[" << kCri << ".containerd.runtimes.runsc.options]\n"
          << "  TypeUrl = \"io.containerd.runsc.v1.options\"\n"
          << "  ConfigPath = \"" << options.runsc_config_path << "\"\n\n"
          << "# " << options.runsc_config_path << " (tessera runtime-config runsc-toml):\n";
      {
        std::istringstream runsc(RunscToml());
        std::string line;
        while (std::getline(runsc, line))
          out << "#   " << line << "\n";
      }
      break;
    case Runtime::kKata:
      out << "# RuntimeClass \"kata-qemu-nvidia-gpu\": GPUs passed to a VM with VFIO.\n"
          << "[" << kCri << ".containerd.runtimes.kata-qemu-nvidia-gpu]\n"
          << "  runtime_type = \"io.containerd.kata-qemu-nvidia-gpu.v2\"\n"
          << "  runtime_path = \"/opt/kata/bin/containerd-shim-kata-v2\"\n"
          << "  privileged_without_host_devices = true\n"
          << "  pod_annotations = [\"io.katacontainers.*\"]\n\n"
          << "[" << kCri << ".containerd.runtimes.kata-qemu-nvidia-gpu.options]\n"
          << "  ConfigPath = \"" << options.kata_config_path << "\"\n";
      break;
  }
  return out.str();
}

std::string RunscToml() {
  return "# runsc flags for GPU containers: nvproxy proxies /dev/nvidiactl, /dev/nvidia-uvm and\n"
         "# /dev/nvidia# (no MIG) for the driver versions gVisor supports.\n"
         "[runsc_config]\n"
         "  nvproxy = \"true\"\n";
}

std::string PodmanContainersConf(Runtime runtime, const ContainerdConfigOptions& options) {
  std::ostringstream out;
  out << "# containers.conf: add to /etc/containers/containers.conf (podman >= 4.1 reads CDI\n"
      << "# specs from these dirs; run with --device nvidia.com/gpu=<name>)\n"
      << "[engine]\n"
      << "cdi_spec_dirs = " << TomlStringArray(options.cdi_spec_dirs) << "\n";
  switch (runtime) {
    case Runtime::kRunc:
      out << "runtime = \"runc\"\n\n[engine.runtimes]\n"
          << "runc = [\"/usr/bin/runc\", \"/usr/sbin/runc\", \"/usr/local/bin/runc\"]\n";
      break;
    case Runtime::kGvisor:
      out << "\n[engine.runtimes]\n"
          << "runsc = [\"/usr/local/bin/runsc\", \"/usr/bin/runsc\"]\n"
          << "# containers.conf has no per-runtime flags: run GPU containers with\n"
          << "#   podman run --runtime runsc --runtime-flag nvproxy=true --device nvidia.com/gpu=0 "
             "...\n";
      break;
    case Runtime::kKata:
      out << "\n[engine.runtimes]\n"
          << "kata = [\"/opt/kata/bin/kata-runtime\", \"/usr/bin/kata-runtime\"]\n"
          << "runtime_supports_kvm = [\"kata\"]\n"
          << "# Kata reads its GPU VM settings from " << options.kata_config_path << "\n"
          << "# (KATA_CONF_FILE); GPUs must be bound to vfio-pci (CDI mode vfio).\n";
      break;
  }
  return out.str();
}

}  // namespace tessera::runtimes
