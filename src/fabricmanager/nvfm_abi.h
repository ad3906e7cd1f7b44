// The part of NVIDIA Fabric Manager's client ABI (nv_fm_agent.h / nv_fm_types.h, Fabric Manager
// SDK) that tessera calls, declared here so no NVIDIA header or library is needed to build.
// Layouts and values follow the published headers: every struct starts with a version word made
// as sizeof(struct) | (version << 24); return codes are 0 for success and negative errors.
#pragma once

#include <cstdint>

namespace tessera::fabricmanager::nvfm {

using Return = int;                // fmReturn_t
using Handle = void*;              // fmHandle_t
using PartitionId = unsigned int;  // fmFabricPartitionId_t

// fmReturn_t. 0 .. -10 are in every SDK; the newer header extends the list to -29.
inline constexpr Return kSuccess = 0;
inline constexpr Return kBadParam = -1;
inline constexpr Return kGenericError = -2;
inline constexpr Return kNotSupported = -3;
inline constexpr Return kUninitialized = -4;
inline constexpr Return kTimeout = -5;
inline constexpr Return kVersionMismatch = -6;
inline constexpr Return kInUse = -7;
inline constexpr Return kNotConfigured = -8;
inline constexpr Return kConnectionNotValid = -9;
inline constexpr Return kNvlinkError = -10;
inline constexpr Return kLowestKnownReturn = -29;  // FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR

inline constexpr int kMaxStringLength = 256;  // FM_MAX_STR_LENGTH
inline constexpr int kUuidBufferSize = 80;
inline constexpr int kPciBusIdBufferSize = 32;
inline constexpr int kMaxGpus = 16;
inline constexpr int kMaxPartitions = 64;
inline constexpr int kMaxNvSwitches = 12;       // FM_MAX_NUM_NVSWITCHES
inline constexpr int kMaxNvlinkPorts = 64;      // FM_MAX_NUM_NVLINK_PORTS
inline constexpr unsigned kDefaultPort = 6666;  // FM_CMD_PORT_NUMBER

template <typename T>
constexpr unsigned int MakeVersion(unsigned int version) {
  return static_cast<unsigned int>(sizeof(T)) | (version << 24);
}

// fmConnectParams_v1: what older fabric managers take.
struct ConnectParamsV1 {
  unsigned int version;
  char address_info[kMaxStringLength];  // "ip[:port]" or a unix socket path
  unsigned int timeout_ms;
  unsigned int address_is_unix_socket;
};
inline constexpr unsigned int kConnectParamsV1Version = MakeVersion<ConnectParamsV1>(1);

// nvFmApiAddrTypes, the v2 address type.
enum AddressType : int {
  kAddressUnknown = 0,
  kAddressInet = 1,   // address_info "<ipv4>:<port>"
  kAddressUnix = 2,   // address_info "<socket path>"
  kAddressVsock = 3,  // address_info "<cid>:<port>"
};

// fmConnectParams_v2: v1 plus the address type; address_is_unix_socket is deprecated but still
// filled in for libraries that read it.
struct ConnectParamsV2 {
  unsigned int version;
  char address_info[kMaxStringLength];
  unsigned int timeout_ms;
  unsigned int address_is_unix_socket;
  AddressType address_type;
};
inline constexpr unsigned int kConnectParamsV2Version = MakeVersion<ConnectParamsV2>(2);

struct PartitionGpuInfo {
  unsigned int physical_id;  // the GPU module ID
  char uuid[kUuidBufferSize];
  char pci_bus_id[kPciBusIdBufferSize];
  unsigned int num_nvlinks_available;
  unsigned int max_num_nvlinks;
  unsigned int nvlink_line_rate_mbps;
};

struct PartitionInfo {
  PartitionId partition_id;
  unsigned int is_active;
  unsigned int num_gpus;
  PartitionGpuInfo gpu_info[kMaxGpus];
};

// fmFabricPartitionList_v2; its version word uses version number 1.
struct PartitionList {
  unsigned int version;
  unsigned int num_partitions;
  unsigned int max_num_partitions;
  PartitionInfo partition_info[kMaxPartitions];
};
inline constexpr unsigned int kPartitionListVersion = MakeVersion<PartitionList>(1);

struct ActivatedPartitionList {
  unsigned int version;
  unsigned int num_partitions;
  PartitionId partition_ids[kMaxPartitions];
};
inline constexpr unsigned int kActivatedPartitionListVersion =
    MakeVersion<ActivatedPartitionList>(1);

// fmNvlinkFailedDeviceInfo_t: a GPU or NVSwitch with NVLink ports that failed to train.
struct NvlinkFailedDeviceInfo {
  char uuid[kUuidBufferSize];
  char pci_bus_id[kPciBusIdBufferSize];
  unsigned int num_ports;
  unsigned int port_num[kMaxNvlinkPorts];
};

// fmNvlinkFailedDevices_v1 (version word with version number 1). Fabric managers of boards whose
// NVLinks train themselves (HGX H100 and later) always answer an empty list.
struct NvlinkFailedDevices {
  unsigned int version;
  unsigned int num_gpus;
  unsigned int num_switches;
  NvlinkFailedDeviceInfo gpu_info[kMaxGpus];
  NvlinkFailedDeviceInfo switch_info[kMaxNvSwitches];
};
inline constexpr unsigned int kNvlinkFailedDevicesVersion = MakeVersion<NvlinkFailedDevices>(1);

// Exported function names and signatures. fmConnect takes either connect structure; its version
// word says which.
using LibInitFn = Return (*)();
using LibShutdownFn = Return (*)();
using ConnectFn = Return (*)(void* params, Handle*);
using DisconnectFn = Return (*)(Handle);
using GetSupportedFabricPartitionsFn = Return (*)(Handle, PartitionList*);
using ActivateFabricPartitionFn = Return (*)(Handle, PartitionId);
using DeactivateFabricPartitionFn = Return (*)(Handle, PartitionId);
using SetActivatedFabricPartitionsFn = Return (*)(Handle, ActivatedPartitionList*);
using GetNvlinkFailedDevicesFn = Return (*)(Handle, NvlinkFailedDevices*);

// "FM_ST_IN_USE" etc.; "FM_ST_<code>" for codes past the known list.
const char* ReturnName(Return code);
// What a code means for a partition call, in an operator's words (empty when nothing useful).
const char* ReturnMeaning(Return code);

}  // namespace tessera::fabricmanager::nvfm
