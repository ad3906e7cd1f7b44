// Activating NVLink fabric partitions (shared NVSwitch mode). One interface, two
// implementations: a file-backed one (hosts without a fabric manager, tests, development) that
// keeps the active list in a JSON file and enforces the same rules, and an adapter to NVIDIA
// Fabric Manager's client library `libnvfm.so.1`, loaded with dlopen at run time so tessera never
// needs it to build or start.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "topology/topology.h"

namespace tessera::fabricmanager {

struct PartitionGpu {
  int module_id = 0;        // the fabric manager's physicalId: the GPU module ID
  std::string pci_address;  // canonical lowercase "0000:18:00.0"
  std::string uuid;
  int nvlinks_available = 0;
  int max_nvlinks = 0;
};

struct SupportedPartition {
  uint32_t id = 0;
  bool active = false;
  std::vector<PartitionGpu> gpus;
};

// Not thread-safe: one owner calls it (the fabric manager serialises activations anyway).
class FabricManager {
 public:
  virtual ~FabricManager() = default;
  virtual Result<std::vector<SupportedPartition>> ListPartitions() = 0;
  virtual Status Activate(uint32_t partition_id) = 0;
  virtual Status Deactivate(uint32_t partition_id) = 0;
  // After a fabric-manager restart (in its --restart resiliency mode), tells it which partitions
  // are still active; an empty list must be sent too.
  virtual Status SetActivatedPartitions(const std::vector<uint32_t>& partition_ids) = 0;
};

// The partition table (module IDs and the module -> PCI address map) a fabric manager reports.
Result<topology::PartitionTable> TableFromPartitions(
    const std::vector<SupportedPartition>& partitions, const std::string& board);

// File-backed: `state_path` holds {"active": [ids]}; a missing file means none active. Every call
// reads the file and writes it back atomically, so separate processes see each other's changes.
Result<std::unique_ptr<FabricManager>> OpenFileFabricManager(topology::PartitionTable table,
                                                             std::string state_path);

struct NvfmOptions {
  std::string library = "libnvfm.so.1";  // a name for the dynamic loader's search, or a path
  // TCP "host[:port]" (port 6666 by default) or, with unix_socket, the socket path from
  // FM_CMD_UNIX_SOCKET_PATH.
  std::string address = "127.0.0.1";
  bool unix_socket = false;
  unsigned timeout_ms = 5000;
};

// Loads the library, initialises it and connects. Unavailable when the library or one of its
// functions is missing or the fabric manager cannot be reached.
Result<std::unique_ptr<FabricManager>> ConnectNvfm(const NvfmOptions& options);

}  // namespace tessera::fabricmanager
