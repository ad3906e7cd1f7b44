#include "support/fake_fabric_manager.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <sstream>

namespace tessera::testing {
namespace {

// The stand-in's own lock: every change here is atomic with respect to its calls.
class StateLock {
 public:
  explicit StateLock(const std::string& state) {
    fd_ = ::open((state + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~StateLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void SetLocked(const std::string& state, const std::string& key, const std::string& value) {
  std::istringstream lines(Read(state));
  std::string out, line;
  bool found = false;
  while (std::getline(lines, line)) {
    if (line.substr(0, line.find(' ')) == key) {
      line = key + " " + value;
      found = true;
    }
    out += line + "\n";
  }
  if (!found) out += key + " " + value + "\n";
  std::ofstream(state + ".tmp", std::ios::trunc) << out;
  std::rename((state + ".tmp").c_str(), state.c_str());
}

}  // namespace

long long BootTimeMs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

FakeFabricManager::FakeFabricManager(const std::string& address) : state_(dir_.path() + "/fm") {
  std::ofstream(state_) << "mode shared\ngeneration 1\nrestart_at 0\naddress " << address
                        << "\nconnect any\nbus_ids zeroed\nfail_activate 0\nactive\n";
  ::setenv("TESSERA_FAKE_NVFM_STATE", state_.c_str(), 1);
}

FakeFabricManager::~FakeFabricManager() {
  ::unsetenv("TESSERA_FAKE_NVFM_STATE");
}

void FakeFabricManager::Set(const std::string& key, const std::string& value) const {
  StateLock lock(state_);
  SetLocked(state_, key, value);
}

std::string FakeFabricManager::Get(const std::string& key) const {
  StateLock lock(state_);
  std::istringstream lines(Read(state_));
  std::string line;
  while (std::getline(lines, line)) {
    auto space = line.find(' ');
    if (line.substr(0, space) == key)
      return space == std::string::npos ? "" : line.substr(space + 1);
  }
  return "";
}

std::vector<int> FakeFabricManager::Active() const {
  std::istringstream words(Get("active"));
  std::vector<int> out;
  int id;
  while (words >> id)
    out.push_back(id);
  return out;
}

void FakeFabricManager::Restart() const {
  StateLock lock(state_);
  std::istringstream lines(Read(state_));
  std::string line;
  long long generation = 1;
  while (std::getline(lines, line))
    if (line.rfind("generation ", 0) == 0) generation = std::stoll(line.substr(11));
  SetLocked(state_, "mode", "restart");
  SetLocked(state_, "generation", std::to_string(generation + 1));
  SetLocked(state_, "restart_at", std::to_string(BootTimeMs()));
}

std::vector<FabricCall> FakeFabricManager::Calls() const {
  std::istringstream lines(Read(state_ + ".log"));
  std::vector<FabricCall> out;
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    FabricCall call;
    if (words >> call.ms >> call.pid >> call.call >> call.argument >> call.rc)
      out.push_back(std::move(call));
  }
  return out;
}

std::vector<FabricCall> FakeFabricManager::Succeeded(const std::string& name) const {
  std::vector<FabricCall> out;
  for (auto& call : Calls())
    if (call.call == name && call.rc == 0) out.push_back(std::move(call));
  return out;
}

}  // namespace tessera::testing
