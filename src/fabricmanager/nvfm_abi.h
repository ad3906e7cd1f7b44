// The part of NVIDIA Fabric Manager's client ABI (nv_fm_agent.h / nv_fm_types.h, Fabric Manager
// SDK) that tessera calls, declared here so no NVIDIA header or library is needed to build.
// Layouts and values follow the published API reference: every struct starts with a version word
// made as sizeof(struct) | (version << 24); return codes are 0 for success and negative errors.
#pragma once

#include <cstdint>

namespace tessera::fabricmanager::nvfm {

using Return = int;                // fmReturn_t
using Handle = void*;              // fmHandle_t
using PartitionId = unsigned int;  // fmFabricPartitionId_t

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

inline constexpr int kMaxStringLength = 256;
inline constexpr int kUuidBufferSize = 80;
inline constexpr int kPciBusIdBufferSize = 32;
inline constexpr int kMaxGpus = 16;
inline constexpr int kMaxPartitions = 64;

template <typename T>
constexpr unsigned int MakeVersion(unsigned int version) {
  return static_cast<unsigned int>(sizeof(T)) | (version << 24);
}

struct ConnectParams {
  unsigned int version;
  char address_info[kMaxStringLength];
  unsigned int timeout_ms;
  unsigned int address_is_unix_socket;
};
inline constexpr unsigned int kConnectParamsVersion = MakeVersion<ConnectParams>(1);

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

// Exported function names and signatures.
using LibInitFn = Return (*)();
using LibShutdownFn = Return (*)();
using ConnectFn = Return (*)(ConnectParams*, Handle*);
using DisconnectFn = Return (*)(Handle);
using GetSupportedFabricPartitionsFn = Return (*)(Handle, PartitionList*);
using ActivateFabricPartitionFn = Return (*)(Handle, PartitionId);
using DeactivateFabricPartitionFn = Return (*)(Handle, PartitionId);
using SetActivatedFabricPartitionsFn = Return (*)(Handle, ActivatedPartitionList*);

const char* ReturnName(Return code);

}  // namespace tessera::fabricmanager::nvfm
