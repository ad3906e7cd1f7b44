// A stand-in for libnvfm.so.1 built by the tests: the same exported C functions, an HGX 8-GPU
// partition table in memory, and failures chosen with the FAKE_NVFM_MODE environment variable
// (init-fails, connect-refused, not-configured, nvlink-error). Built a second time without
// fmActivateFabricPartition to test a library that lacks a function.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fabricmanager/nvfm_abi.h"

namespace nvfm = tessera::fabricmanager::nvfm;

namespace {

// HGX H100 8-GPU: partition p has ID p; bit m-1 of its mask is module m.
const unsigned kMasks[15] = {0xff, 0x0f, 0xf0, 0x05, 0x0a, 0x50, 0xa0, 0x01,
                             0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80};
bool active[15];
int dummy_handle;

bool Mode(const char* mode) {
  const char* value = std::getenv("FAKE_NVFM_MODE");
  return value && std::strcmp(value, mode) == 0;
}

unsigned Modules(int p) {
  return kMasks[p];
}

int Find(unsigned id) {
  return id < 15 ? static_cast<int>(id) : -1;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvfm::Return fmLibInit() {
  return Mode("init-fails") ? nvfm::kGenericError : nvfm::kSuccess;
}
__attribute__((visibility("default"))) nvfm::Return fmLibShutdown() {
  return nvfm::kSuccess;
}

__attribute__((visibility("default"))) nvfm::Return fmConnect(nvfm::ConnectParams* params,
                                                              nvfm::Handle* handle) {
  if (params == nullptr || handle == nullptr) return nvfm::kBadParam;
  if (params->version != nvfm::kConnectParamsVersion) return nvfm::kVersionMismatch;
  if (Mode("connect-refused")) return nvfm::kConnectionNotValid;
  *handle = &dummy_handle;
  return nvfm::kSuccess;
}

__attribute__((visibility("default"))) nvfm::Return fmDisconnect(nvfm::Handle handle) {
  return handle == &dummy_handle ? nvfm::kSuccess : nvfm::kBadParam;
}

__attribute__((visibility("default"))) nvfm::Return fmGetSupportedFabricPartitions(
    nvfm::Handle handle, nvfm::PartitionList* list) {
  if (handle != &dummy_handle || list == nullptr) return nvfm::kBadParam;
  if (list->version != nvfm::kPartitionListVersion) return nvfm::kVersionMismatch;
  if (Mode("not-configured")) return nvfm::kNotConfigured;
  static const int kBus[9] = {0, 0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf};
  list->num_partitions = 15;
  list->max_num_partitions = 15;
  for (int p = 0; p < 15; ++p) {
    nvfm::PartitionInfo& info = list->partition_info[p];
    info.partition_id = p;
    info.is_active = active[p];
    info.num_gpus = 0;
    unsigned mask = Modules(p);
    for (int m = 1; m <= 8; ++m) {
      if (!(mask & (1u << (m - 1)))) continue;
      nvfm::PartitionGpuInfo& gpu = info.gpu_info[info.num_gpus++];
      gpu.physical_id = m;
      std::snprintf(gpu.uuid, sizeof gpu.uuid, "GPU-0000000%d-fake", m);
      std::snprintf(gpu.pci_bus_id, sizeof gpu.pci_bus_id, "00000000:%02X:00.0", kBus[m]);
      gpu.num_nvlinks_available = 18;
      gpu.max_num_nvlinks = 18;
      gpu.nvlink_line_rate_mbps = 26562;
    }
  }
  return nvfm::kSuccess;
}

#ifndef FAKE_NVFM_WITHOUT_ACTIVATE
__attribute__((visibility("default"))) nvfm::Return fmActivateFabricPartition(
    nvfm::Handle handle, nvfm::PartitionId id) {
  int p = Find(id);
  if (handle != &dummy_handle || p < 0) return nvfm::kBadParam;
  if (active[p]) return nvfm::kInUse;
  for (int q = 0; q < 15; ++q) {
    if (active[q] && (Modules(q) & Modules(p))) return nvfm::kInUse;
  }
  if (Mode("nvlink-error")) return nvfm::kNvlinkError;
  active[p] = true;
  return nvfm::kSuccess;
}
#endif

__attribute__((visibility("default"))) nvfm::Return fmDeactivateFabricPartition(
    nvfm::Handle handle, nvfm::PartitionId id) {
  int p = Find(id);
  if (handle != &dummy_handle || p < 0) return nvfm::kBadParam;
  if (!active[p]) return nvfm::kUninitialized;
  active[p] = false;
  return nvfm::kSuccess;
}

__attribute__((visibility("default"))) nvfm::Return fmSetActivatedFabricPartitions(
    nvfm::Handle handle, nvfm::ActivatedPartitionList* list) {
  if (handle != &dummy_handle || list == nullptr) return nvfm::kBadParam;
  if (list->version != nvfm::kActivatedPartitionListVersion) return nvfm::kVersionMismatch;
  bool next[15] = {};
  for (unsigned i = 0; i < list->num_partitions; ++i) {
    int p = Find(list->partition_ids[i]);
    if (p < 0) return nvfm::kBadParam;
    next[p] = true;
  }
  std::memcpy(active, next, sizeof active);
  return nvfm::kSuccess;
}

}  // extern "C"
