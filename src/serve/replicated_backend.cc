#include "serve/replicated_backend.h"

namespace tessera::serve {
namespace {

class DurableStartBackend final : public backends::ContainerBackend {
 public:
  DurableStartBackend(std::unique_ptr<backends::ContainerBackend> backend, fleet::Store& store,
                      std::function<bool()> leading)
      : backend_(std::move(backend)), store_(store), leading_(std::move(leading)) {}

  std::string name() const override { return backend_->name(); }
  Status CheckIsolation(fleet::Isolation isolation, int gpus) const override {
    return backend_->CheckIsolation(isolation, gpus);
  }
  Status Start(const backends::StartRequest& request, backends::ExitCallback on_exit) override {
    // The scheduler queued the placement before handing the start over: an empty commit is a
    // barrier behind it.
    if (auto status = store_.CommitAndWait({}); !status)
      return status.error().WithContext("placement not recorded");
    if (leading_ && !leading_())
      return Unavailable("this replica no longer leads; its successor places the container");
    return backend_->Start(request, std::move(on_exit));
  }
  Status Watch(const std::string& id, backends::ExitCallback on_exit) override {
    return backend_->Watch(id, std::move(on_exit));
  }
  Status Resume(const std::string& id, backends::ExitCallback on_exit) override {
    return backend_->Resume(id, std::move(on_exit));
  }
  Status Stop(const std::string& id, std::chrono::seconds grace) override {
    return backend_->Stop(id, grace);
  }
  Result<backends::BackendContainer> Inspect(const std::string& id) override {
    return backend_->Inspect(id);
  }
  Result<std::string> Logs(const std::string& id) override { return backend_->Logs(id); }
  Result<std::vector<backends::BackendContainer>> List() override { return backend_->List(); }
  Status Remove(const std::string& id) override { return backend_->Remove(id); }
  Result<std::string> RuntimeId(const std::string& id) override { return backend_->RuntimeId(id); }
  std::map<std::string, backends::GpuGaugeReading> GpuGauges() override {
    return backend_->GpuGauges();
  }
  Status PrepareTenancy(const std::string& tenancy,
                        const tenancy::StorageEntitlements& storage) override {
    return backend_->PrepareTenancy(tenancy, storage);
  }
  Result<backends::GpuCheckVerdict> AwaitGpuCheck(const std::string& id,
                                                  std::chrono::milliseconds timeout) override {
    return backend_->AwaitGpuCheck(id, timeout);
  }
  Status ReleaseTenancy(const std::string& tenancy) override {
    return backend_->ReleaseTenancy(tenancy);
  }

 private:
  std::unique_ptr<backends::ContainerBackend> backend_;
  fleet::Store& store_;
  std::function<bool()> leading_;
};

}  // namespace

std::unique_ptr<backends::ContainerBackend> StartAfterPlacementIsDurable(
    std::unique_ptr<backends::ContainerBackend> backend, fleet::Store& store,
    std::function<bool()> leading) {
  return std::make_unique<DurableStartBackend>(std::move(backend), store, std::move(leading));
}

}  // namespace tessera::serve
