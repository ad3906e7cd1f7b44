#include "support/fake_mps.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "support/file_text.h"

namespace tessera::testing {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp", std::ios::trunc) << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

FakeMps::FakeMps() {
  ::setenv("TESSERA_FAKE_MPS_DIR", dir_.path().c_str(), 1);
  ::setenv("TESSERA_FAKE_NVML_COMPUTE_MODES", (dir_.path() + "/compute-modes").c_str(), 1);
  ::setenv("TESSERA_FAKE_NVML_LOG", (dir_.path() + "/transcript").c_str(), 1);
  Write(dir_.path() + "/transcript", "");
}

FakeMps::~FakeMps() {
  ::unsetenv("TESSERA_FAKE_MPS_DIR");
  ::unsetenv("TESSERA_FAKE_NVML_COMPUTE_MODES");
  ::unsetenv("TESSERA_FAKE_MPS_WATCH");
}

std::string FakeMps::Binary() {
  return std::string(TESSERA_BINARY_DIR) + "/tests/mps/fake-bin/nvidia-cuda-mps-control";
}

std::string FakeMps::Transcript() const {
  return ReadText(dir_.path() + "/transcript");
}

std::vector<std::string> FakeMps::Lines(const std::string& needle) const {
  std::vector<std::string> out;
  std::istringstream in(Transcript());
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

void FakeMps::SetBehaviour(const std::string& uuid, const std::string& behaviour) const {
  const std::string path = dir_.path() + "/" + uuid + ".behaviour";
  if (behaviour.empty()) {
    std::remove(path.c_str());
    std::remove((path + ".done").c_str());
    return;
  }
  Write(path, behaviour + "\n");
}

void FakeMps::SetStartDelayMs(const std::string& uuid, int ms) const {
  Write(dir_.path() + "/" + uuid + ".start-delay-ms", std::to_string(ms) + "\n");
}

void FakeMps::SetAnswerDelayMs(const std::string& uuid, int ms) const {
  Write(dir_.path() + "/" + uuid + ".answer-delay-ms", std::to_string(ms) + "\n");
}

std::string FakeMps::NvidiaSmi() {
  return std::string(TESSERA_BINARY_DIR) + "/tests/mps/fake-bin/nvidia-smi";
}

void FakeMps::SetClients(const std::string& uuid, const std::vector<int>& pids) const {
  std::string text;
  for (int pid : pids)
    text += std::to_string(pid) + "\n";
  Write(dir_.path() + "/" + uuid + ".clients", text);
}

int FakeMps::ComputeMode(const std::string& pci) const {
  std::istringstream in(ReadText(dir_.path() + "/compute-modes"));
  int mode = 0;
  for (std::string name, value; in >> name >> value;)
    if (name == pci) mode = std::atoi(value.c_str());
  return mode;
}

void FakeMps::FailSetComputeMode(int nvml_error) const {
  std::ofstream(dir_.path() + "/compute-modes", std::ios::app)
      << "fail nvmlDeviceSetComputeMode " << nvml_error << "\n";
}

void FakeMps::Watch(const std::string& path_pattern) const {
  ::setenv("TESSERA_FAKE_MPS_WATCH", path_pattern.c_str(), 1);
}

}  // namespace tessera::testing
