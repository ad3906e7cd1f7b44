// Adapter to NVIDIA Fabric Manager's client library (nvfm_library.h: loaded with dlopen at run
// time, every call under a deadline).
#include <arpa/inet.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "fabricmanager/fabricmanager.h"
#include "fabricmanager/nvfm_abi.h"
#include "fabricmanager/nvfm_library.h"

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

class NvfmFabricManager : public FabricManager {
 public:
  NvfmFabricManager(std::shared_ptr<NvfmLibrary> library, nvfm::Handle handle,
                    std::chrono::milliseconds deadline, std::string description)
      : library_(std::move(library)),
        handle_(handle),
        deadline_(deadline),
        description_(std::move(description)) {}

  // A connection whose call did not answer is left alone: that call may still be using it.
  ~NvfmFabricManager() override {
    if (lost_) return;
    auto disconnect = library_->api().disconnect;
    (void)library_->Call("fmDisconnect", deadline_,
                         [disconnect, h = handle_] { return disconnect(h); });
  }

  Result<std::vector<SupportedPartition>> ListPartitions() override {
    // About 100 KiB: off the stack, and owned by the call (it may outlive this function).
    auto list = std::make_shared<nvfm::PartitionList>();
    std::memset(list.get(), 0, sizeof *list);
    list->version = nvfm::kPartitionListVersion;
    auto get = library_->api().get_supported;
    auto rc = Bounded("fmGetSupportedFabricPartitions",
                      [get, h = handle_, list] { return get(h, list.get()); });
    if (!rc) return rc.error();
    if (*rc != nvfm::kSuccess) return NvfmError("fmGetSupportedFabricPartitions", *rc);
    return Convert(*list);
  }

  Status Activate(uint32_t partition_id) override {
    const std::string call = "fmActivateFabricPartition(" + std::to_string(partition_id) + ")";
    auto activate = library_->api().activate;
    auto rc =
        Bounded(call, [activate, h = handle_, partition_id] { return activate(h, partition_id); });
    if (!rc) return rc.error();
    if (*rc != nvfm::kSuccess) {
      return NvfmError(call, *rc, *rc == nvfm::kInUse ? OverlappingActive(partition_id) : "");
    }
    return Ok();
  }

  Status Deactivate(uint32_t partition_id) override {
    const std::string call = "fmDeactivateFabricPartition(" + std::to_string(partition_id) + ")";
    auto deactivate = library_->api().deactivate;
    auto rc = Bounded(
        call, [deactivate, h = handle_, partition_id] { return deactivate(h, partition_id); });
    if (!rc) return rc.error();
    if (*rc != nvfm::kSuccess) return NvfmError(call, *rc);
    return Ok();
  }

  Status SetActivatedPartitions(const std::vector<uint32_t>& partition_ids) override {
    if (auto valid = CheckActivatedList(partition_ids); !valid)
      return valid.error().WithContext("fmSetActivatedFabricPartitions");
    auto list = std::make_shared<nvfm::ActivatedPartitionList>();
    std::memset(list.get(), 0, sizeof *list);
    list->version = nvfm::kActivatedPartitionListVersion;
    list->num_partitions = static_cast<unsigned>(partition_ids.size());
    for (size_t i = 0; i < partition_ids.size(); ++i)
      list->partition_ids[i] = partition_ids[i];
    auto set = library_->api().set_activated;
    auto rc = Bounded("fmSetActivatedFabricPartitions",
                      [set, h = handle_, list] { return set(h, list.get()); });
    if (!rc) return rc.error();
    if (*rc != nvfm::kSuccess) return NvfmError("fmSetActivatedFabricPartitions", *rc);
    return Ok();
  }

  Result<NvlinkFailedDevices> GetNvlinkFailedDevices() override {
    auto get = library_->api().get_nvlink_failed;
    if (get == nullptr) {
      return Unavailable(library_->name() +
                         ": function fmGetNvlinkFailedDevices is missing; the fabric's NVLink "
                         "failures cannot be asked");
    }
    // About 6 KiB, owned by the call (it may outlive this function).
    auto raw = std::make_shared<nvfm::NvlinkFailedDevices>();
    std::memset(raw.get(), 0, sizeof *raw);
    raw->version = nvfm::kNvlinkFailedDevicesVersion;
    auto rc =
        Bounded("fmGetNvlinkFailedDevices", [get, h = handle_, raw] { return get(h, raw.get()); });
    if (!rc) return rc.error();
    if (*rc != nvfm::kSuccess) return NvfmError("fmGetNvlinkFailedDevices", *rc);
    return DecodeNvlinkFailedDevices(*raw);
  }

  std::string Describe() const override { return description_; }

 private:
  // A call under the deadline, on a connection that has not lost one yet.
  Result<nvfm::Return> Bounded(const std::string& call, std::function<nvfm::Return()> fn) {
    if (lost_) {
      return Unavailable(call + ": not sent: this connection lost an earlier call (" +
                         std::string(kNoAnswer) + " " + DeadlineText(deadline_) + ")");
    }
    auto rc = library_->Call(call, deadline_, std::move(fn));
    if (!rc && IsNoAnswer(rc.error())) lost_ = true;
    return rc;
  }

  static Result<std::vector<SupportedPartition>> Convert(const nvfm::PartitionList& list) {
    if (list.num_partitions > nvfm::kMaxPartitions) {
      return Internal("fmGetSupportedFabricPartitions: " + std::to_string(list.num_partitions) +
                      " partitions, more than the API's limit of 64");
    }
    std::vector<SupportedPartition> out;
    for (unsigned i = 0; i < list.num_partitions; ++i) {
      const nvfm::PartitionInfo& info = list.partition_info[i];
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

  std::shared_ptr<NvfmLibrary> library_;
  nvfm::Handle handle_;
  std::chrono::milliseconds deadline_;
  std::string description_;
  bool lost_ = false;  // a call did not answer: the connection is never used again
};

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

// fmConnect with one connect structure, under the deadline. A connection made after the caller
// stopped waiting is closed on the call's thread.
Result<nvfm::Return> ConnectBounded(NvfmLibrary& library, const std::string& what,
                                    std::chrono::milliseconds deadline,
                                    std::shared_ptr<std::vector<char>> params,
                                    std::shared_ptr<nvfm::Handle> handle) {
  const NvfmApi api = library.api();
  return library.Call(
      what, deadline, [api, params, handle] { return api.connect(params->data(), handle.get()); },
      [api, handle](nvfm::Return rc) {
        if (rc == nvfm::kSuccess) api.disconnect(*handle);
      });
}

template <typename Params>
std::shared_ptr<std::vector<char>> Bytes(const Params& params) {
  auto out = std::make_shared<std::vector<char>>(sizeof params);
  std::memcpy(out->data(), &params, sizeof params);
  return out;
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
  if (options.timeout_ms == 0) return InvalidArgument("fabric manager: a deadline of 0 ms");
  auto library = NvfmLibrary::Open(options.library);
  if (!library) return library.error();
  const std::chrono::milliseconds deadline(options.timeout_ms);
  const bool unix_socket = options.address.unix_socket;
  const std::string what = "fmConnect " + options.address.ToString();
  // Newer libraries take v2 (with the address type); older ones only v1 and answer
  // FM_ST_VERSION_MISMATCH to v2.
  nvfm::ConnectParamsV2 v2;
  std::memset(&v2, 0, sizeof v2);
  v2.version = nvfm::kConnectParamsV2Version;
  FillCommon(v2, info, options.timeout_ms, unix_socket);
  v2.address_type = unix_socket ? nvfm::kAddressUnix : nvfm::kAddressInet;
  auto handle = std::make_shared<nvfm::Handle>(nullptr);
  int version = 2;
  auto rc = ConnectBounded(**library, what, deadline, Bytes(v2), handle);
  if (rc && *rc == nvfm::kVersionMismatch) {
    spdlog::debug("fmConnect {}: the library refuses connect parameters v2; trying v1",
                  options.address.ToString());
    nvfm::ConnectParamsV1 v1;
    std::memset(&v1, 0, sizeof v1);
    v1.version = nvfm::kConnectParamsV1Version;
    FillCommon(v1, info, options.timeout_ms, unix_socket);
    version = 1;
    rc = ConnectBounded(**library, what, deadline, Bytes(v1), handle);
  }
  if (!rc) return rc.error();
  if (*rc != nvfm::kSuccess) return NvfmError(what, *rc);
  std::string description = options.library + " -> " + options.address.ToString() + " (connect v" +
                            std::to_string(version) + "), deadline " + DeadlineText(deadline);
  spdlog::debug("connected to fabric manager: {}", description);
  return std::unique_ptr<FabricManager>(
      new NvfmFabricManager(std::move(*library), *handle, deadline, std::move(description)));
}

}  // namespace tessera::fabricmanager
