// A stand-in for libnvfm.so.1 built by the tests: the same exported C functions and structures,
// behaving like a fabric manager in shared NVSwitch mode (HGX H100 8-GPU partitions).
//
// Its state is a file named by TESSERA_FAKE_NVFM_STATE, shared by every process that loads the
// library (tessera, tessera-serve, the DRA plugin, the test itself), read and written under an
// flock on "<state>.lock". One fact per line (tests/fabricmanager/fake_fabric_manager.h writes it):
//   mode shared|not-shared|restart|exited|down
//        shared: serving; not-shared: FABRIC_MODE is not 1 (partition calls: NOT_SUPPORTED);
//        restart: restarted with FABRIC_MODE_RESTART=1, answering everything but
//        fmSetActivatedFabricPartitions with NOT_CONFIGURED, exiting (mode exited) when not told
//        within 60 s; down/exited: nothing listens (fmConnect: CONNECTION_NOT_VALID)
//   generation N       connections made under another generation are gone (CONNECTION_NOT_VALID)
//   restart_at MS      CLOCK_BOOTTIME ms when restart mode began
//   address A          where it listens: "unix:/path" or "ipv4:port"
//   connect v1|v2|any  which fmConnectParams versions it takes (others: VERSION_MISMATCH)
//   bus_ids zeroed|real  zeroed: empty UUID and bus ID 00000000:00:00.0 (H100 and later)
//   fail_activate CODE activations answer CODE (0: none)
//   active ID...       the active partitions
//   hang CALL...       these calls never answer while listed (connect, list, activate, deactivate,
//                      set, failed, or all): what a fabric manager that accepts and then sends
//                      nothing, or half an answer, looks like through the client library. The call
//                      returns FM_ST_TIMEOUT without effect once the line no longer names it (5 min
//                      cap).
//   partitions ID=M,M.. ID=..  the partition list reported instead of the built-in one (listing
//                      tests: any IDs and modules, duplicates included; none is active)
//   failed_gpus BUS=P,P.. BUS=..      fmGetNvlinkFailedDevices: GPUs with failed NVLink ports
//   failed_switches BUS=P,P.. BUS=..  (BUS as the fabric manager writes it, "00000000:18:00.0";
//                      "none" or nothing: no failures)
// Every call is appended to "<state>.log" as "<CLOCK_BOOTTIME ms> <pid> <call> <argument> <rc>".
// Built a second time without fmActivateFabricPartition, to test a library that lacks one.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fabricmanager/nvfm_abi.h"

namespace nvfm = tessera::fabricmanager::nvfm;

namespace {

// HGX H100 8-GPU in shared NVSwitch mode: partition p has ID p; bit m-1 of its mask is module m.
constexpr int kPartitions = 15;
const unsigned kMasks[kPartitions] = {0xff, 0x0f, 0xf0, 0x05, 0x0a, 0x50, 0xa0, 0x01,
                                      0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80};
// Bus of module m with bus_ids real (the hgx-h100-dgx fixture's GPUs, by NVML module ID).
const int kBus[9] = {0, 0x2a, 0x5d, 0x18, 0x3a, 0xab, 0xdb, 0x9a, 0xba};
constexpr long long kRestartTimeoutMs = 60000;

struct State {
  std::string mode = "shared";
  long long generation = 1;
  long long restart_at = 0;
  std::string address = "127.0.0.1:6666";
  std::string connect = "any";
  std::string bus_ids = "zeroed";
  int fail_activate = 0;
  bool active[kPartitions] = {};
  std::string hang;         // the calls that never answer, as written
  std::string partitions;   // a listing that replaces the built-in one, as written
  std::string failed_gpus;  // failed NVLinks, as written
  std::string failed_switches;
};

struct Connection {
  unsigned magic = 0x464d4e56;
  long long generation = 0;
};

long long NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

const char* StatePath() {
  const char* path = std::getenv("TESSERA_FAKE_NVFM_STATE");
  return path && *path ? path : nullptr;
}

// Holds the state file's lock for one call.
class Locked {
 public:
  Locked() {
    if (const char* path = StatePath()) {
      fd_ = ::open((std::string(path) + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ >= 0) ::flock(fd_, LOCK_EX);
    }
  }
  ~Locked() {
    if (fd_ >= 0) ::close(fd_);
  }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  int fd_ = -1;
};

bool Load(State* state) {
  const char* path = StatePath();
  if (!path) return false;
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "mode") words >> state->mode;
    if (key == "generation") words >> state->generation;
    if (key == "restart_at") words >> state->restart_at;
    if (key == "address") words >> state->address;
    if (key == "connect") words >> state->connect;
    if (key == "bus_ids") words >> state->bus_ids;
    if (key == "fail_activate") words >> state->fail_activate;
    if (key == "hang") std::getline(words, state->hang);
    if (key == "partitions") std::getline(words, state->partitions);
    if (key == "failed_gpus") std::getline(words, state->failed_gpus);
    if (key == "failed_switches") std::getline(words, state->failed_switches);
    for (std::string* text :
         {&state->hang, &state->partitions, &state->failed_gpus, &state->failed_switches})
      if (text->find_first_not_of(' ') == std::string::npos) text->clear();
    if (key == "active") {
      int id;
      while (words >> id)
        if (id >= 0 && id < kPartitions) state->active[id] = true;
    }
  }
  return true;
}

void Save(const State& state) {
  const char* path = StatePath();
  if (!path) return;
  std::string temp = std::string(path) + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << "mode " << state.mode << "\ngeneration " << state.generation << "\nrestart_at "
        << state.restart_at << "\naddress " << state.address << "\nconnect " << state.connect
        << "\nbus_ids " << state.bus_ids << "\nfail_activate " << state.fail_activate << "\nactive";
    for (int p = 0; p < kPartitions; ++p)
      if (state.active[p]) out << " " << p;
    out << "\n";
    if (!state.hang.empty()) out << "hang" << state.hang << "\n";
    if (!state.partitions.empty()) out << "partitions" << state.partitions << "\n";
    if (!state.failed_gpus.empty()) out << "failed_gpus" << state.failed_gpus << "\n";
    if (!state.failed_switches.empty()) out << "failed_switches" << state.failed_switches << "\n";
  }
  std::rename(temp.c_str(), path);
}

void Log(const char* call, const std::string& argument, nvfm::Return rc) {
  const char* path = StatePath();
  if (!path) return;
  FILE* f = std::fopen((std::string(path) + ".log").c_str(), "a");
  if (!f) return;
  std::fprintf(f, "%lld %ld %s %s %d\n", NowMs(), static_cast<long>(::getpid()), call,
               argument.empty() ? "-" : argument.c_str(), rc);
  std::fclose(f);
}

bool Hangs(const std::string& call) {
  State state;
  if (!Load(&state)) return false;
  std::istringstream words(state.hang);
  std::string word;
  while (words >> word)
    if (word == call || word == "all") return true;
  return false;
}

// A call the state says never answers: waits, without the state lock (the test and other calls
// go on), until the state stops naming it. True when it hung (the call then answers TIMEOUT).
bool HangWhileListed(const char* name, const std::string& call) {
  if (!Hangs(call)) return false;
  Log(name, "hang", nvfm::kTimeout);
  const long long until = NowMs() + 300000;
  while (Hangs(call) && NowMs() < until)
    usleep(20000);
  return true;
}

// `partitions 0=1,2 1=3`: the listing a test asked for instead of the built-in one.
void FillCustomList(const State& state, nvfm::PartitionList* list) {
  std::istringstream words(state.partitions);
  std::string word;
  unsigned count = 0;
  while (words >> word && count < static_cast<unsigned>(nvfm::kMaxPartitions)) {
    nvfm::PartitionInfo& info = list->partition_info[count++];
    info.partition_id = static_cast<unsigned>(std::stoul(word.substr(0, word.find('='))));
    info.is_active = 0;
    info.num_gpus = 0;
    std::istringstream modules(word.substr(word.find('=') + 1));
    std::string module;
    while (std::getline(modules, module, ',') && info.num_gpus < nvfm::kMaxGpus) {
      nvfm::PartitionGpuInfo& gpu = info.gpu_info[info.num_gpus++];
      gpu.physical_id = static_cast<unsigned>(std::stoul(module));
      std::snprintf(gpu.pci_bus_id, sizeof gpu.pci_bus_id, "00000000:00:00.0");
      gpu.num_nvlinks_available = 18;
      gpu.max_num_nvlinks = 18;
    }
  }
  list->num_partitions = count;
  list->max_num_partitions = nvfm::kMaxPartitions;
}

// `00000000:18:00.0=4,5 ...` into `devices`, at most `max` of them; "none" lists nothing.
unsigned FillFailed(const std::string& text, nvfm::NvlinkFailedDeviceInfo* devices, int max) {
  std::istringstream words(text);
  std::string word;
  unsigned count = 0;
  while (words >> word && word != "none" && count < static_cast<unsigned>(max)) {
    nvfm::NvlinkFailedDeviceInfo& device = devices[count++];
    const std::string bus = word.substr(0, word.find('='));
    std::snprintf(device.pci_bus_id, sizeof device.pci_bus_id, "%s", bus.c_str());
    std::snprintf(device.uuid, sizeof device.uuid, "DEV-%s", bus.c_str());
    device.num_ports = 0;
    std::istringstream ports(word.find('=') == std::string::npos ? ""
                                                                 : word.substr(word.find('=') + 1));
    std::string port;
    while (std::getline(ports, port, ',') && device.num_ports < nvfm::kMaxNvlinkPorts)
      device.port_num[device.num_ports++] = static_cast<unsigned>(std::stoul(port));
  }
  return count;
}

// Restart mode ends in an exit when the active list does not come within 60 s.
void Age(State* state) {
  if (state->mode == "restart" && NowMs() - state->restart_at > kRestartTimeoutMs) {
    state->mode = "exited";
    Save(*state);
  }
}

bool Gone(const State& state) {
  return state.mode == "down" || state.mode == "exited";
}

// The common checks of a partition call: a live connection to a fabric manager that serves
// partition calls. kSuccess when the call may go on.
nvfm::Return Check(nvfm::Handle handle, State* state) {
  auto* connection = static_cast<Connection*>(handle);
  if (connection == nullptr || connection->magic != 0x464d4e56) return nvfm::kBadParam;
  if (!Load(state)) return nvfm::kConnectionNotValid;
  Age(state);
  if (Gone(*state) || connection->generation != state->generation) return nvfm::kConnectionNotValid;
  if (state->mode == "not-shared") return nvfm::kNotSupported;
  return nvfm::kSuccess;
}

bool Overlapping(const State& state, int p) {
  for (int q = 0; q < kPartitions; ++q)
    if (state.active[q] && (kMasks[q] & kMasks[p])) return true;
  return false;
}

std::string AddressAsked(const char* info, bool unix_socket) {
  std::string text(info, strnlen(info, nvfm::kMaxStringLength));
  if (unix_socket) return "unix:" + text;
  if (text.find(':') == std::string::npos) text += ":" + std::to_string(nvfm::kDefaultPort);
  return text;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvfm::Return fmLibInit() {
  const char* mode = std::getenv("FAKE_NVFM_MODE");
  return mode && std::strcmp(mode, "init-fails") == 0 ? nvfm::kGenericError : nvfm::kSuccess;
}

__attribute__((visibility("default"))) nvfm::Return fmLibShutdown() {
  return nvfm::kSuccess;
}

__attribute__((visibility("default"))) nvfm::Return fmConnect(void* params, nvfm::Handle* handle) {
  if (params == nullptr || handle == nullptr) return nvfm::kBadParam;
  if (HangWhileListed("fmConnect", "connect")) return nvfm::kTimeout;
  Locked lock;
  State state;
  const unsigned version = *static_cast<unsigned*>(params);
  std::string asked;
  int v = 0;
  if (version == nvfm::kConnectParamsV2Version) {
    auto* p = static_cast<nvfm::ConnectParamsV2*>(params);
    if (p->address_type != nvfm::kAddressInet && p->address_type != nvfm::kAddressUnix)
      return nvfm::kBadParam;
    asked = AddressAsked(p->address_info, p->address_type == nvfm::kAddressUnix);
    v = 2;
  } else if (version == nvfm::kConnectParamsV1Version) {
    auto* p = static_cast<nvfm::ConnectParamsV1*>(params);
    asked = AddressAsked(p->address_info, p->address_is_unix_socket != 0);
    v = 1;
  } else {
    Log("fmConnect", "version=" + std::to_string(version), nvfm::kVersionMismatch);
    return nvfm::kVersionMismatch;
  }
  nvfm::Return rc = nvfm::kSuccess;
  const bool loaded = Load(&state);
  if (loaded) Age(&state);
  if (loaded && state.connect != "any" && state.connect != "v" + std::to_string(v)) {
    rc = nvfm::kVersionMismatch;
  } else if (!loaded || Gone(state) || asked != state.address) {
    rc = nvfm::kConnectionNotValid;  // nothing listens there
  }
  Log("fmConnect", "v" + std::to_string(v) + ":" + asked, rc);
  if (rc != nvfm::kSuccess) return rc;
  auto* connection = new Connection;
  connection->generation = state.generation;
  *handle = connection;
  return nvfm::kSuccess;
}

__attribute__((visibility("default"))) nvfm::Return fmDisconnect(nvfm::Handle handle) {
  auto* connection = static_cast<Connection*>(handle);
  if (connection == nullptr || connection->magic != 0x464d4e56) return nvfm::kBadParam;
  connection->magic = 0;
  delete connection;
  return nvfm::kSuccess;
}

__attribute__((visibility("default"))) nvfm::Return fmGetSupportedFabricPartitions(
    nvfm::Handle handle, nvfm::PartitionList* list) {
  if (list == nullptr) return nvfm::kBadParam;
  if (list->version != nvfm::kPartitionListVersion) return nvfm::kVersionMismatch;
  if (HangWhileListed("fmGetSupportedFabricPartitions", "list")) return nvfm::kTimeout;
  Locked lock;
  State state;
  nvfm::Return rc = Check(handle, &state);
  if (rc == nvfm::kSuccess && state.mode == "restart") rc = nvfm::kNotConfigured;
  if (rc != nvfm::kSuccess) {
    Log("fmGetSupportedFabricPartitions", "", rc);
    return rc;
  }
  if (!state.partitions.empty()) {
    FillCustomList(state, list);
    return nvfm::kSuccess;
  }
  list->num_partitions = kPartitions;
  list->max_num_partitions = kPartitions;
  for (int p = 0; p < kPartitions; ++p) {
    nvfm::PartitionInfo& info = list->partition_info[p];
    info.partition_id = p;
    info.is_active = state.active[p];
    info.num_gpus = 0;
    for (int m = 1; m <= 8; ++m) {
      if (!(kMasks[p] & (1u << (m - 1)))) continue;
      nvfm::PartitionGpuInfo& gpu = info.gpu_info[info.num_gpus++];
      gpu.physical_id = m;
      if (state.bus_ids == "real") {
        std::snprintf(gpu.uuid, sizeof gpu.uuid, "GPU-0000000%d-fake", m);
        std::snprintf(gpu.pci_bus_id, sizeof gpu.pci_bus_id, "00000000:%02X:00.0", kBus[m]);
      } else {
        gpu.uuid[0] = 0;
        std::snprintf(gpu.pci_bus_id, sizeof gpu.pci_bus_id, "00000000:00:00.0");
      }
      // Single-GPU partitions have their NVLinks disabled.
      const bool single = __builtin_popcount(kMasks[p]) == 1;
      gpu.num_nvlinks_available = single ? 0 : 18;
      gpu.max_num_nvlinks = 18;
      gpu.nvlink_line_rate_mbps = 26562;
    }
  }
  return nvfm::kSuccess;
}

#ifndef FAKE_NVFM_WITHOUT_ACTIVATE
__attribute__((visibility("default"))) nvfm::Return fmActivateFabricPartition(
    nvfm::Handle handle, nvfm::PartitionId id) {
  if (HangWhileListed("fmActivateFabricPartition", "activate")) return nvfm::kTimeout;
  Locked lock;
  State state;
  nvfm::Return rc = Check(handle, &state);
  if (rc == nvfm::kSuccess) {
    if (state.mode == "restart") {
      rc = nvfm::kNotConfigured;
    } else if (id >= static_cast<unsigned>(kPartitions)) {
      rc = nvfm::kBadParam;
    } else if (Overlapping(state, static_cast<int>(id))) {
      rc = nvfm::kInUse;
    } else if (state.fail_activate != 0) {
      rc = state.fail_activate;
    } else {
      state.active[id] = true;
      Save(state);
    }
  }
  Log("fmActivateFabricPartition", std::to_string(id), rc);
  return rc;
}
#endif

__attribute__((visibility("default"))) nvfm::Return fmDeactivateFabricPartition(
    nvfm::Handle handle, nvfm::PartitionId id) {
  if (HangWhileListed("fmDeactivateFabricPartition", "deactivate")) return nvfm::kTimeout;
  Locked lock;
  State state;
  nvfm::Return rc = Check(handle, &state);
  if (rc == nvfm::kSuccess) {
    if (state.mode == "restart") {
      rc = nvfm::kNotConfigured;
    } else if (id >= static_cast<unsigned>(kPartitions)) {
      rc = nvfm::kBadParam;
    } else if (!state.active[id]) {
      rc = nvfm::kUninitialized;  // not active: refused
    } else {
      state.active[id] = false;
      Save(state);
    }
  }
  Log("fmDeactivateFabricPartition", std::to_string(id), rc);
  return rc;
}

__attribute__((visibility("default"))) nvfm::Return fmSetActivatedFabricPartitions(
    nvfm::Handle handle, nvfm::ActivatedPartitionList* list) {
  if (list == nullptr) return nvfm::kBadParam;
  if (list->version != nvfm::kActivatedPartitionListVersion) return nvfm::kVersionMismatch;
  if (HangWhileListed("fmSetActivatedFabricPartitions", "set")) return nvfm::kTimeout;
  Locked lock;
  State state;
  nvfm::Return rc = Check(handle, &state);
  std::string ids;
  if (rc == nvfm::kSuccess) {
    State next = state;
    std::fill(std::begin(next.active), std::end(next.active), false);
    if (list->num_partitions > static_cast<unsigned>(nvfm::kMaxPartitions)) rc = nvfm::kBadParam;
    for (unsigned i = 0; rc == nvfm::kSuccess && i < list->num_partitions; ++i) {
      unsigned id = list->partition_ids[i];
      ids += (ids.empty() ? "" : ",") + std::to_string(id);
      if (id >= static_cast<unsigned>(kPartitions) || Overlapping(next, static_cast<int>(id))) {
        rc = nvfm::kBadParam;
        break;
      }
      next.active[id] = true;
    }
    if (rc == nvfm::kSuccess) {
      next.mode = "shared";
      Save(next);
    }
  }
  Log("fmSetActivatedFabricPartitions", "[" + ids + "]", rc);
  return rc;
}

__attribute__((visibility("default"))) nvfm::Return fmGetNvlinkFailedDevices(
    nvfm::Handle handle, nvfm::NvlinkFailedDevices* devices) {
  if (devices == nullptr) return nvfm::kBadParam;
  if (devices->version != nvfm::kNvlinkFailedDevicesVersion) return nvfm::kVersionMismatch;
  if (HangWhileListed("fmGetNvlinkFailedDevices", "failed")) return nvfm::kTimeout;
  Locked lock;
  State state;
  nvfm::Return rc = Check(handle, &state);
  if (rc == nvfm::kSuccess && state.mode == "restart") rc = nvfm::kNotConfigured;
  if (rc != nvfm::kSuccess) {
    Log("fmGetNvlinkFailedDevices", "", rc);
    return rc;
  }
  devices->num_gpus = FillFailed(state.failed_gpus, devices->gpu_info, nvfm::kMaxGpus);
  devices->num_switches =
      FillFailed(state.failed_switches, devices->switch_info, nvfm::kMaxNvSwitches);
  return nvfm::kSuccess;
}

}  // extern "C"
