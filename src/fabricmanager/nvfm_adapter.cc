// Adapter to NVIDIA Fabric Manager's client library, loaded with dlopen at run time.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "fabricmanager/fabricmanager.h"
#include "fabricmanager/nvfm_abi.h"

namespace tessera::fabricmanager {
namespace {

// Maps a fabric-manager status to an Error category; `call` names the call and its argument.
Error NvfmError(const std::string& call, nvfm::Return code, const std::string& detail = "") {
  std::string message = call + ": " + nvfm::ReturnName(code) + " (" + std::to_string(code) + ")";
  if (const char* meaning = nvfm::ReturnMeaning(code); *meaning)
    message += ": " + std::string(meaning);
  message += detail;
  switch (code) {
    case nvfm::kBadParam:
      return InvalidArgument(message);
    case nvfm::kInUse:
    case nvfm::kUninitialized:
    case nvfm::kNotSupported:
    case nvfm::kNvlinkError:
      return FailedPrecondition(message);
    case nvfm::kTimeout:
    case nvfm::kNotConfigured:  // initialising, or restarted and waiting for the active list
    case nvfm::kConnectionNotValid:
    case -22:  // FM_ST_NOT_READY
      return Unavailable(message);
    default:
      return Internal(message);
  }
}

// "00000000:18:00.0" (NVML style, upper case) -> "0000:18:00.0"; empty for the zeroed bus ID
// H100 and later report.
std::string CanonicalPciAddress(const char* raw, size_t size) {
  std::string text(raw, strnlen(raw, size));
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t colon = text.find(':');
  if (colon != std::string::npos && colon > 4 && text.find_first_not_of('0') >= colon - 4) {
    text.erase(0, colon - 4);
  }
  if (text.find_first_not_of("0:.") == std::string::npos) return "";
  return text;
}

class NvfmFabricManager : public FabricManager {
 public:
  struct Api {
    nvfm::LibInitFn lib_init = nullptr;
    nvfm::LibShutdownFn lib_shutdown = nullptr;
    nvfm::ConnectFn connect = nullptr;
    nvfm::DisconnectFn disconnect = nullptr;
    nvfm::GetSupportedFabricPartitionsFn get_supported = nullptr;
    nvfm::ActivateFabricPartitionFn activate = nullptr;
    nvfm::DeactivateFabricPartitionFn deactivate = nullptr;
    nvfm::SetActivatedFabricPartitionsFn set_activated = nullptr;
  };

  NvfmFabricManager(void* library, Api api, nvfm::Handle handle, std::string description)
      : library_(library), api_(api), handle_(handle), description_(std::move(description)) {}

  ~NvfmFabricManager() override {
    api_.disconnect(handle_);
    api_.lib_shutdown();
    dlclose(library_);
  }

  Result<std::vector<SupportedPartition>> ListPartitions() override {
    // About 100 KiB: keep it off the stack.
    auto list = std::make_unique<nvfm::PartitionList>();
    std::memset(list.get(), 0, sizeof *list);
    list->version = nvfm::kPartitionListVersion;
    if (nvfm::Return rc = api_.get_supported(handle_, list.get()); rc != nvfm::kSuccess) {
      return NvfmError("fmGetSupportedFabricPartitions", rc);
    }
    if (list->num_partitions > nvfm::kMaxPartitions) {
      return Internal("fmGetSupportedFabricPartitions: " + std::to_string(list->num_partitions) +
                      " partitions, more than the API's limit of 64");
    }
    std::vector<SupportedPartition> out;
    for (unsigned i = 0; i < list->num_partitions; ++i) {
      const nvfm::PartitionInfo& info = list->partition_info[i];
      if (info.num_gpus > nvfm::kMaxGpus) {
        return Internal("fmGetSupportedFabricPartitions: partition " +
                        std::to_string(info.partition_id) + " has " +
                        std::to_string(info.num_gpus) + " GPUs, more than 16");
      }
      SupportedPartition partition;
      partition.id = info.partition_id;
      partition.active = info.is_active != 0;
      for (unsigned g = 0; g < info.num_gpus; ++g) {
        const nvfm::PartitionGpuInfo& gpu_info = info.gpu_info[g];
        PartitionGpu gpu;
        gpu.module_id = static_cast<int>(std::min(gpu_info.physical_id, 1u << 20));
        gpu.pci_address = CanonicalPciAddress(gpu_info.pci_bus_id, sizeof gpu_info.pci_bus_id);
        gpu.uuid = std::string(gpu_info.uuid, strnlen(gpu_info.uuid, sizeof gpu_info.uuid));
        gpu.nvlinks_available = static_cast<int>(std::min(gpu_info.num_nvlinks_available, 1024u));
        gpu.max_nvlinks = static_cast<int>(std::min(gpu_info.max_num_nvlinks, 1024u));
        partition.gpus.push_back(std::move(gpu));
      }
      out.push_back(std::move(partition));
    }
    return out;
  }

  Status Activate(uint32_t partition_id) override {
    if (nvfm::Return rc = api_.activate(handle_, partition_id); rc != nvfm::kSuccess) {
      return NvfmError("fmActivateFabricPartition(" + std::to_string(partition_id) + ")", rc,
                       rc == nvfm::kInUse ? OverlappingActive(partition_id) : "");
    }
    return Ok();
  }

  Status Deactivate(uint32_t partition_id) override {
    if (nvfm::Return rc = api_.deactivate(handle_, partition_id); rc != nvfm::kSuccess) {
      return NvfmError("fmDeactivateFabricPartition(" + std::to_string(partition_id) + ")", rc);
    }
    return Ok();
  }

  Status SetActivatedPartitions(const std::vector<uint32_t>& partition_ids) override {
    if (partition_ids.size() > static_cast<size_t>(nvfm::kMaxPartitions)) {
      return InvalidArgument("fmSetActivatedFabricPartitions: more than 64 partitions");
    }
    nvfm::ActivatedPartitionList list;
    std::memset(&list, 0, sizeof list);
    list.version = nvfm::kActivatedPartitionListVersion;
    list.num_partitions = static_cast<unsigned>(partition_ids.size());
    for (size_t i = 0; i < partition_ids.size(); ++i)
      list.partition_ids[i] = partition_ids[i];
    if (nvfm::Return rc = api_.set_activated(handle_, &list); rc != nvfm::kSuccess) {
      return NvfmError("fmSetActivatedFabricPartitions", rc);
    }
    return Ok();
  }

  std::string Describe() const override { return description_; }

 private:
  // FM_ST_IN_USE names no partition: the list says which active ones share a GPU module with
  // `partition_id` (or that it is active itself).
  std::string OverlappingActive(uint32_t partition_id) {
    auto listed = ListPartitions();
    if (!listed) return "";
    const SupportedPartition* wanted = nullptr;
    for (const auto& p : *listed)
      if (p.id == partition_id) wanted = &p;
    if (!wanted) return "";
    std::string names;
    for (const auto& p : *listed) {
      if (!p.active) continue;
      auto mine = wanted->modules();
      auto theirs = p.modules();
      bool overlaps = std::any_of(mine.begin(), mine.end(), [&](int m) {
        return std::find(theirs.begin(), theirs.end(), m) != theirs.end();
      });
      if (!overlaps) continue;
      names += (names.empty() ? "" : ", ") + std::string("partition ") + std::to_string(p.id) +
               " " + ModuleSet(theirs) + (p.id == partition_id ? " (itself)" : "");
    }
    return names.empty() ? "" : " (active: " + names + ")";
  }

  void* library_;
  Api api_;
  nvfm::Handle handle_;
  std::string description_;
};

template <typename Fn>
Status Resolve(void* library, const std::string& name, const char* symbol, Fn* out) {
  dlerror();
  void* address = dlsym(library, symbol);
  if (const char* error = dlerror(); error != nullptr || address == nullptr) {
    return Unavailable(name + ": function " + symbol + " is missing (" +
                       (error ? error : "null symbol") + "); not a Fabric Manager client library");
  }
  *out = reinterpret_cast<Fn>(address);
  return Ok();
}

// The API takes "<ipv4>:<port>": a host name is resolved here.
Result<std::string> InetAddressInfo(const FabricAddress& address) {
  std::string host = address.host;
  in_addr parsed{};
  if (inet_pton(AF_INET, host.c_str(), &parsed) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || !found) {
      return Unavailable("fabric manager host " + host + ": " + gai_strerror(rc));
    }
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof text);
    freeaddrinfo(found);
    host = text;
  }
  return host + ":" + std::to_string(address.port);
}

template <typename Params>
void FillCommon(Params& params, const std::string& info, unsigned timeout_ms, bool unix_socket) {
  std::memcpy(params.address_info, info.data(), info.size());
  params.timeout_ms = timeout_ms;
  params.address_is_unix_socket = unix_socket ? 1 : 0;
}

}  // namespace

Result<std::unique_ptr<FabricManager>> ConnectNvfm(const NvfmOptions& options) {
  std::string info = options.address.path;
  if (!options.address.unix_socket) {
    auto inet = InetAddressInfo(options.address);
    if (!inet) return inet.error();
    info = *inet;
  }
  if (info.size() >= static_cast<size_t>(nvfm::kMaxStringLength)) {
    return InvalidArgument("fabric manager address is longer than " +
                           std::to_string(nvfm::kMaxStringLength - 1) + " bytes");
  }
  void* library = dlopen(options.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = dlerror();
    return Unavailable("dlopen " + options.library + ": " + (error ? error : "failed") +
                       " (is NVIDIA Fabric Manager's client library installed?)");
  }
  NvfmFabricManager::Api api;
  const std::string& name = options.library;
  for (Status resolved :
       {Resolve(library, name, "fmLibInit", &api.lib_init),
        Resolve(library, name, "fmLibShutdown", &api.lib_shutdown),
        Resolve(library, name, "fmConnect", &api.connect),
        Resolve(library, name, "fmDisconnect", &api.disconnect),
        Resolve(library, name, "fmGetSupportedFabricPartitions", &api.get_supported),
        Resolve(library, name, "fmActivateFabricPartition", &api.activate),
        Resolve(library, name, "fmDeactivateFabricPartition", &api.deactivate),
        Resolve(library, name, "fmSetActivatedFabricPartitions", &api.set_activated)}) {
    if (!resolved) {
      dlclose(library);
      return resolved.error();
    }
  }
  // FM_ST_IN_USE: the library was already initialised in this process, which is fine.
  if (nvfm::Return rc = api.lib_init(); rc != nvfm::kSuccess && rc != nvfm::kInUse) {
    dlclose(library);
    return NvfmError("fmLibInit", rc);
  }
  const bool unix_socket = options.address.unix_socket;
  // Newer libraries take v2 (with the address type); older ones only v1 and answer
  // FM_ST_VERSION_MISMATCH to v2.
  nvfm::ConnectParamsV2 v2;
  std::memset(&v2, 0, sizeof v2);
  v2.version = nvfm::kConnectParamsV2Version;
  FillCommon(v2, info, options.timeout_ms, unix_socket);
  v2.address_type = unix_socket ? nvfm::kAddressUnix : nvfm::kAddressInet;
  nvfm::Handle handle = nullptr;
  int version = 2;
  nvfm::Return rc = api.connect(&v2, &handle);
  if (rc == nvfm::kVersionMismatch) {
    spdlog::debug("fmConnect {}: the library refuses connect parameters v2; trying v1",
                  options.address.ToString());
    nvfm::ConnectParamsV1 v1;
    std::memset(&v1, 0, sizeof v1);
    v1.version = nvfm::kConnectParamsV1Version;
    FillCommon(v1, info, options.timeout_ms, unix_socket);
    version = 1;
    rc = api.connect(&v1, &handle);
  }
  if (rc != nvfm::kSuccess) {
    api.lib_shutdown();
    dlclose(library);
    return NvfmError("fmConnect " + options.address.ToString(), rc);
  }
  std::string description = options.library + " -> " + options.address.ToString() + " (connect v" +
                            std::to_string(version) + ")";
  spdlog::debug("connected to fabric manager: {}", description);
  return std::unique_ptr<FabricManager>(
      new NvfmFabricManager(library, api, handle, std::move(description)));
}

}  // namespace tessera::fabricmanager
