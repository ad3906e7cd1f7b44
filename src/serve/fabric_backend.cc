#include "serve/fabric_backend.h"

#include <spdlog/spdlog.h>

#include <mutex>
#include <set>

namespace tessera::serve {
namespace {

class FabricBackend final : public backends::ForwardingBackend {
 public:
  FabricBackend(std::unique_ptr<backends::ContainerBackend> backend,
                std::shared_ptr<fabricmanager::PartitionActivator> fabric)
      : ForwardingBackend(std::move(backend)), fabric_(std::move(fabric)) {}

  Status Start(const backends::StartRequest& request, backends::ExitCallback on_exit) override {
    if (request.gpu_pci_addresses.empty()) return inner().Start(request, std::move(on_exit));
    InFlight starting(this, request.id);
    if (auto activated = fabric_->Activate(request.id, request.gpu_pci_addresses); !activated)
      return activated.error();
    auto started = inner().Start(request, DeactivateThen(std::move(on_exit)));
    if (!started) Release(request.id, "its start failed");
    return started;
  }

  Status Watch(const std::string& id, backends::ExitCallback on_exit) override {
    return inner().Watch(id, DeactivateThen(std::move(on_exit)));
  }

  // Its start was cut short by the service's death: the partition it holds must be active
  // before it starts.
  Status Resume(const std::string& id, backends::ExitCallback on_exit) override {
    InFlight resuming(this, id);
    if (fabric_->HeldBy(id)) {
      if (auto active = fabric_->EnsureActive(id); !active) return active;
    }
    return inner().Resume(id, DeactivateThen(std::move(on_exit)));
  }

  // The service reconciles with this list after a restart: the partitions are reconciled with
  // the same list first, so every container it finds ended has its partition deactivated before
  // its GPUs are checked. Starts under way hold theirs.
  Result<std::vector<backends::BackendContainer>> List() override {
    auto listed = inner().List();
    if (!listed) return listed;
    std::set<std::string> alive;
    for (const auto& container : *listed) {
      if (container.state != backends::BackendState::kExited) alive.insert(container.id);
    }
    {
      std::lock_guard lock(mu_);
      alive.insert(in_flight_.begin(), in_flight_.end());
    }
    if (auto reconciled =
            fabric_->Reconcile([&](const std::string& holder) { return alive.count(holder) > 0; });
        !reconciled) {
      spdlog::error("fabric partitions: {}", reconciled.error().message);
    }
    return listed;
  }

 private:
  // Marks a start that holds (or is about to hold) a partition the backend cannot list yet.
  class InFlight {
   public:
    InFlight(FabricBackend* owner, std::string id) : owner_(owner), id_(std::move(id)) {
      std::lock_guard lock(owner_->mu_);
      owner_->in_flight_.insert(id_);
    }
    ~InFlight() {
      std::lock_guard lock(owner_->mu_);
      owner_->in_flight_.erase(id_);
    }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    FabricBackend* owner_;
    std::string id_;
  };

  void Release(const std::string& id, const char* why) {
    if (auto released = fabric_->Deactivate(id); !released)
      spdlog::error("container {} ({}): {}", id, why, released.error().message);
  }

  // The end reaches the service only once the partition is deactivated: the service then
  // releases the GPUs to their firmware check.
  backends::ExitCallback DeactivateThen(backends::ExitCallback on_exit) {
    return [this, on_exit = std::move(on_exit)](const std::string& id,
                                                const backends::ExitInfo& info) {
      Release(id, "it ended");
      on_exit(id, info);
    };
  }

  std::shared_ptr<fabricmanager::PartitionActivator> fabric_;
  std::mutex mu_;                    // guards in_flight_
  std::set<std::string> in_flight_;  // starts and resumes under way
};

}  // namespace

std::unique_ptr<backends::ContainerBackend> ActivatePartitionsAround(
    std::unique_ptr<backends::ContainerBackend> backend,
    std::shared_ptr<fabricmanager::PartitionActivator> fabric) {
  return std::make_unique<FabricBackend>(std::move(backend), std::move(fabric));
}

}  // namespace tessera::serve
