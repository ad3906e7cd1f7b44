// The stand-in fabric manager's state for one test (tests/fabricmanager/fake_nvfm.cc): a state
// file named by TESSERA_FAKE_NVFM_STATE (set in this process, so child processes inherit it), the
// call log beside it, and the test's levers: restart it, take it down, make activations fail.
#pragma once

#include <string>
#include <vector>

#include "support/fixture_host.h"

namespace tessera::testing {

struct FabricCall {
  long long ms = 0;  // CLOCK_BOOTTIME milliseconds
  long pid = 0;
  std::string call;      // "fmActivateFabricPartition"
  std::string argument;  // "3", "[1,3]", "v2:unix:/run/..."
  int rc = 0;
};

class FakeFabricManager {
 public:
  // A fabric manager in shared NVSwitch mode listening at `address` ("unix:/path" or
  // "ipv4:port"), nothing active.
  explicit FakeFabricManager(const std::string& address = "127.0.0.1:6666");
  FakeFabricManager(const FakeFabricManager&) = delete;
  FakeFabricManager& operator=(const FakeFabricManager&) = delete;
  ~FakeFabricManager();

  const std::string& state_path() const { return state_; }
  // Sets one fact of the state file ("mode", "connect", "bus_ids", "fail_activate", "active").
  void Set(const std::string& key, const std::string& value) const;
  std::string Get(const std::string& key) const;
  std::vector<int> Active() const;
  // Restarted with FABRIC_MODE_RESTART=1: old connections gone, waiting for the active list.
  void Restart() const;
  std::vector<FabricCall> Calls() const;
  // The calls named `call` (e.g. "fmActivateFabricPartition") that succeeded.
  std::vector<FabricCall> Succeeded(const std::string& call) const;

 private:
  TempDir dir_;
  std::string state_;
};

// CLOCK_BOOTTIME in ms: the clock the stand-in logs with (and /proc/uptime counts).
long long BootTimeMs();

}  // namespace tessera::testing
