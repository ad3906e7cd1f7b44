#include "serve/replicated_backend.h"

namespace tessera::serve {
namespace {

class DurableStartBackend final : public backends::ForwardingBackend {
 public:
  DurableStartBackend(std::unique_ptr<backends::ContainerBackend> backend, fleet::Store& store,
                      std::function<bool()> leading)
      : ForwardingBackend(std::move(backend)), store_(store), leading_(std::move(leading)) {}

  Status Start(const backends::StartRequest& request, backends::ExitCallback on_exit) override {
    // The scheduler queued the placement before handing the start over: an empty commit is a
    // barrier behind it.
    if (auto status = store_.CommitAndWait({}); !status)
      return status.error().WithContext("placement not recorded");
    if (leading_ && !leading_())
      return Unavailable("this replica no longer leads; its successor places the container");
    return inner().Start(request, std::move(on_exit));
  }

 private:
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
