// Each GPU's health on this node: shared by the recovery and the publisher, kept in the state
// file across restarts.
#include <cstdio>
#include <filesystem>
#include <thread>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "nodeagent/gpu_recovery.h"

namespace tessera::nodeagent {

std::string NodeHealthStateText(const std::map<std::string, health::GpuHealth>& gpus) {
  k8s::Json by_pci = k8s::Json::object();
  for (const auto& [pci, health] : gpus)
    by_pci[pci] = k8s::GpuHealthJson(health);
  k8s::Json doc = {{"version", 1}, {"gpus", std::move(by_pci)}};
  return doc.dump(2, ' ', false, k8s::Json::error_handler_t::replace) + "\n";
}

Result<std::map<std::string, health::GpuHealth>> ParseNodeHealthState(std::string_view text) {
  k8s::Json doc = k8s::Json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("version") || doc["version"] != 1)
    return InvalidArgument("not a version 1 GPU health state");
  if (!doc.contains("gpus") || !doc["gpus"].is_object()) return InvalidArgument("gpus: missing");
  std::map<std::string, health::GpuHealth> out;
  for (const auto& [pci, value] : doc["gpus"].items()) {
    auto health = k8s::ParseGpuHealthJson(value);
    if (!health) return health.error().WithContext("gpus." + pci);
    out[pci] = std::move(*health);
  }
  return out;
}

bool NodeHealth::Load() {
  auto text = ReadBoundedFile(state_file_, kMaxConfigFileBytes);
  if (!text) {
    if (text.error().category != ErrorCategory::kNotFound)
      std::fprintf(stderr, "tessera-lease-sync: %s: %s\n", state_file_.c_str(),
                   text.error().message.c_str());
    return false;
  }
  auto parsed = ParseNodeHealthState(*text);
  if (!parsed) {
    std::fprintf(stderr, "tessera-lease-sync: %s: %s\n", state_file_.c_str(),
                 parsed.error().message.c_str());
    return false;
  }
  std::lock_guard lock(mu_);
  gpus_ = std::move(*parsed);
  ++version_;
  return true;
}

void NodeHealth::Adopt(const k8s::NodeGpus& published) {
  std::lock_guard lock(mu_);
  bool adopted = false;
  for (const auto& gpu : published.gpus) {
    if (gpu.health == health::GpuHealth{}) continue;
    gpus_[gpu.pci_address] = gpu.health;
    adopted = true;
  }
  if (!adopted) return;
  ++version_;
  SaveLocked();
}

std::map<std::string, health::GpuHealth> NodeHealth::Snapshot(uint64_t* version) {
  std::lock_guard lock(mu_);
  if (version) *version = version_;
  return gpus_;
}

health::GpuHealth NodeHealth::Of(const std::string& pci) {
  std::lock_guard lock(mu_);
  auto it = gpus_.find(pci);
  return it == gpus_.end() ? health::GpuHealth{} : it->second;
}

void NodeHealth::Set(const std::string& pci, const health::GpuHealth& health) {
  {
    std::lock_guard lock(mu_);
    if (gpus_[pci] == health) return;
    gpus_[pci] = health;
    ++version_;
    SaveLocked();
  }
  changed_.notify_all();
}

void NodeHealth::WaitForChange(uint64_t seen, std::chrono::milliseconds wait,
                               const std::atomic<bool>& stop) {
  const auto until = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(mu_);
  // In steps, so that `stop` (set without the lock) is seen soon.
  while (!stop && version_ == seen && std::chrono::steady_clock::now() < until)
    changed_.wait_for(lock, std::chrono::milliseconds(50));
}

void NodeHealth::Fill(k8s::NodeGpus& gpus) {
  std::lock_guard lock(mu_);
  for (auto& gpu : gpus.gpus) {
    auto it = gpus_.find(gpu.pci_address);
    if (it != gpus_.end()) gpu.health = it->second;
  }
}

void NodeHealth::SaveLocked() {
  std::error_code made;
  std::filesystem::create_directories(std::filesystem::path(state_file_).parent_path(), made);
  if (auto status = WriteFileAtomically(state_file_, NodeHealthStateText(gpus_)); !status)
    std::fprintf(stderr, "tessera-lease-sync: %s\n", status.error().message.c_str());
}

}  // namespace tessera::nodeagent
