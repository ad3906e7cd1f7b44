// The null backend: containers end as soon as they start, with exit code 0, and nothing runs.
#include <mutex>
#include <set>

#include "backends/local/local.h"

namespace tessera::backends {
namespace {

class NullBackend final : public ContainerBackend {
 public:
  std::string name() const override { return "null"; }
  Status CheckIsolation(fleet::Isolation, int) const override { return Ok(); }
  Status Start(const StartRequest& request, ExitCallback on_exit) override {
    {
      std::lock_guard lock(mutex_);
      ids_.insert(request.id);
    }
    on_exit(request.id, ExitInfo{0, false, ""});
    return Ok();
  }
  Status Watch(const std::string& id, ExitCallback on_exit) override {
    on_exit(id, ExitInfo{0, false, ""});
    return Ok();
  }
  Status Stop(const std::string& id, std::chrono::seconds) override {
    std::lock_guard lock(mutex_);
    if (!ids_.count(id)) return NotFound("container " + id + " does not exist");
    return Ok();
  }
  Result<BackendContainer> Inspect(const std::string& id) override {
    std::lock_guard lock(mutex_);
    if (!ids_.count(id)) return NotFound("container " + id + " does not exist");
    return BackendContainer{id, BackendState::kExited, 0};
  }
  Result<std::string> Logs(const std::string& id) override {
    std::lock_guard lock(mutex_);
    if (!ids_.count(id)) return NotFound("container " + id + " does not exist");
    return std::string();
  }
  Result<std::vector<BackendContainer>> List() override {
    std::lock_guard lock(mutex_);
    std::vector<BackendContainer> out;
    for (const auto& id : ids_)
      out.push_back(BackendContainer{id, BackendState::kExited, 0});
    return out;
  }
  Status Remove(const std::string& id) override {
    std::lock_guard lock(mutex_);
    if (!ids_.erase(id)) return NotFound("container " + id + " does not exist");
    return Ok();
  }

 private:
  std::mutex mutex_;
  std::set<std::string> ids_;  // what it "ran"; forgotten on restart, as the bench expects
};

}  // namespace

std::unique_ptr<ContainerBackend> CreateNullBackend() {
  return std::make_unique<NullBackend>();
}

}  // namespace tessera::backends
