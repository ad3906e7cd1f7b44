#include "support/fake_nvml_state.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/file_text.h"

namespace tessera::testing {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

}  // namespace

FakeNvmlState::FakeNvmlState(const std::string& fixture)
    : state_(dir_.path() + "/nvml.state"),
      log_(dir_.path() + "/nvml.log"),
      inits_(dir_.path() + "/nvml.inits") {
  std::string text;
  if (!fixture.empty()) {
    text = ReadText(std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/hosts/" + fixture + ".nvml");
  }
  Write(state_, text);
  Write(log_, "");
  Write(inits_, "");
  ::setenv("TESSERA_FAKE_NVML_STATE", state_.c_str(), 1);
  ::setenv("TESSERA_FAKE_NVML_LOG", log_.c_str(), 1);
  ::setenv("TESSERA_FAKE_NVML_INITS", inits_.c_str(), 1);
}

FakeNvmlState::~FakeNvmlState() {
  ::unsetenv("TESSERA_FAKE_NVML_STATE");
  ::unsetenv("TESSERA_FAKE_NVML_LOG");
  ::unsetenv("TESSERA_FAKE_NVML_INITS");
  ::unsetenv("TESSERA_FAKE_NVML_ROOT");
}

void FakeNvmlState::MirrorCapabilitiesUnder(const std::string& root) const {
  ::setenv("TESSERA_FAKE_NVML_ROOT", root.c_str(), 1);
}

std::string FakeNvmlState::State() const {
  return ReadText(state_);
}
std::string FakeNvmlState::Log() const {
  return ReadText(log_);
}
size_t FakeNvmlState::Inits() const {
  std::string text = ReadText(inits_);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}
void FakeNvmlState::Append(const std::string& line) const {
  Write(state_, State() + line + "\n");
}
void FakeNvmlState::Replace(const std::string& from, const std::string& to) const {
  std::string text = State();
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  Write(state_, text);
}

FakeNvmlScenario::FakeNvmlScenario()
    : scenario_(dir_.path() + "/nvml.scenario"), served_(dir_.path() + "/nvml.served") {
  Write("");
  ::setenv("TESSERA_FAKE_NVML_SCENARIO", scenario_.c_str(), 1);
  ::setenv("TESSERA_FAKE_NVML_SERVED", served_.c_str(), 1);
}

FakeNvmlScenario::~FakeNvmlScenario() {
  ::unsetenv("TESSERA_FAKE_NVML_SCENARIO");
  ::unsetenv("TESSERA_FAKE_NVML_SERVED");
}

void FakeNvmlScenario::Write(const std::string& text) const {
  const std::string temporary = scenario_ + ".tmp";
  ::tessera::testing::Write(temporary, text);
  std::rename(temporary.c_str(), scenario_.c_str());
}

std::string FakeNvmlScenario::Served() const {
  return ReadText(served_);
}

FakeNvmlFaults::FakeNvmlFaults(bool holders_refuse_resets)
    : faults_(dir_.path() + "/nvml.faults"),
      events_(dir_.path() + "/nvml.events"),
      holders_(dir_.path() + "/nvml.holders"),
      smi_log_(dir_.path() + "/nvidia-smi.log") {
  Write(faults_, "");
  Write(events_, "");
  Write(smi_log_, "");
  std::filesystem::create_directories(holders_);
  ::setenv("TESSERA_FAKE_NVML_FAULTS", faults_.c_str(), 1);
  ::setenv("TESSERA_FAKE_NVML_EVENTS", events_.c_str(), 1);
  if (holders_refuse_resets)
    ::setenv("TESSERA_FAKE_NVML_HOLDERS", holders_.c_str(), 1);
  else
    ::unsetenv("TESSERA_FAKE_NVML_HOLDERS");
  ::setenv("TESSERA_FAKE_NVIDIA_SMI_LOG", smi_log_.c_str(), 1);
}

FakeNvmlFaults::~FakeNvmlFaults() {
  ::unsetenv("TESSERA_FAKE_NVML_FAULTS");
  ::unsetenv("TESSERA_FAKE_NVML_EVENTS");
  ::unsetenv("TESSERA_FAKE_NVML_HOLDERS");
  ::unsetenv("TESSERA_FAKE_NVIDIA_SMI_LOG");
}

void FakeNvmlFaults::SetFaults(const std::string& text) const {
  const std::string temporary = faults_ + ".tmp";
  Write(temporary, text);
  std::rename(temporary.c_str(), faults_.c_str());
}

std::string FakeNvmlFaults::Faults() const {
  return ReadText(faults_);
}

void FakeNvmlFaults::AddEvent(const std::string& line) const {
  const std::string temporary = events_ + ".tmp";
  Write(temporary, ReadText(events_) + line + "\n");
  std::rename(temporary.c_str(), events_.c_str());
}

std::string FakeNvmlFaults::ResetLog() const {
  return ReadText(smi_log_);
}

uint64_t NowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace tessera::testing
