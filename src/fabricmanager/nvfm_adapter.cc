// Adapter to NVIDIA Fabric Manager's client library, loaded with dlopen at run time.
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstring>

#include "fabricmanager/fabricmanager.h"
#include "fabricmanager/nvfm_abi.h"

namespace tessera::fabricmanager {

const char* nvfm::ReturnName(Return code) {
  switch (code) {
    case kSuccess:
      return "FM_ST_SUCCESS";
    case kBadParam:
      return "FM_ST_BADPARAM";
    case kGenericError:
      return "FM_ST_GENERIC_ERROR";
    case kNotSupported:
      return "FM_ST_NOT_SUPPORTED";
    case kUninitialized:
      return "FM_ST_UNINITIALIZED";
    case kTimeout:
      return "FM_ST_TIMEOUT";
    case kVersionMismatch:
      return "FM_ST_VERSION_MISMATCH";
    case kInUse:
      return "FM_ST_IN_USE";
    case kNotConfigured:
      return "FM_ST_NOT_CONFIGURED";
    case kConnectionNotValid:
      return "FM_ST_CONNECTION_NOT_VALID";
    case kNvlinkError:
      return "FM_ST_NVLINK_ERROR";
  }
  return "unknown fabric manager status";
}

namespace {

// Maps a fabric manager status to an Error category; `call` names the call and its argument.
Error NvfmError(const std::string& call, nvfm::Return code) {
  std::string message = call + ": " + nvfm::ReturnName(code) + " (" + std::to_string(code) + ")";
  switch (code) {
    case nvfm::kBadParam:
      return InvalidArgument(message);
    case nvfm::kInUse:
    case nvfm::kUninitialized:
    case nvfm::kNotSupported:
    case nvfm::kNvlinkError:
      return FailedPrecondition(message);
    case nvfm::kTimeout:
    case nvfm::kNotConfigured:  // still initialising
    case nvfm::kConnectionNotValid:
      return Unavailable(message);
    default:
      return Internal(message);
  }
}

// "00000000:18:00.0" (NVML style, upper case) -> "0000:18:00.0".
std::string CanonicalPciAddress(const char* raw, size_t size) {
  std::string text(raw, strnlen(raw, size));
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t colon = text.find(':');
  if (colon != std::string::npos && colon > 4 && text.find_first_not_of('0') >= colon - 4) {
    text.erase(0, colon - 4);
  }
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

  NvfmFabricManager(void* library, Api api, nvfm::Handle handle)
      : library_(library), api_(api), handle_(handle) {}

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
        gpu.module_id = static_cast<int>(gpu_info.physical_id);
        gpu.pci_address = CanonicalPciAddress(gpu_info.pci_bus_id, sizeof gpu_info.pci_bus_id);
        gpu.uuid = std::string(gpu_info.uuid, strnlen(gpu_info.uuid, sizeof gpu_info.uuid));
        gpu.nvlinks_available = static_cast<int>(gpu_info.num_nvlinks_available);
        gpu.max_nvlinks = static_cast<int>(gpu_info.max_num_nvlinks);
        partition.gpus.push_back(std::move(gpu));
      }
      out.push_back(std::move(partition));
    }
    return out;
  }

  Status Activate(uint32_t partition_id) override {
    if (nvfm::Return rc = api_.activate(handle_, partition_id); rc != nvfm::kSuccess) {
      return NvfmError("fmActivateFabricPartition(" + std::to_string(partition_id) + ")", rc);
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

 private:
  void* library_;
  Api api_;
  nvfm::Handle handle_;
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

}  // namespace

Result<std::unique_ptr<FabricManager>> ConnectNvfm(const NvfmOptions& options) {
  if (options.address.size() >= static_cast<size_t>(nvfm::kMaxStringLength)) {
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
  nvfm::ConnectParams params;
  std::memset(&params, 0, sizeof params);
  params.version = nvfm::kConnectParamsVersion;
  std::memcpy(params.address_info, options.address.data(), options.address.size());
  params.timeout_ms = options.timeout_ms;
  params.address_is_unix_socket = options.unix_socket ? 1 : 0;
  nvfm::Handle handle = nullptr;
  if (nvfm::Return rc = api.connect(&params, &handle); rc != nvfm::kSuccess) {
    api.lib_shutdown();
    dlclose(library);
    return NvfmError("fmConnect " + options.address, rc);
  }
  spdlog::debug("connected to fabric manager at {} through {}", options.address, options.library);
  return std::unique_ptr<FabricManager>(new NvfmFabricManager(library, api, handle));
}

}  // namespace tessera::fabricmanager
