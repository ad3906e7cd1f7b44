// Backend starts run beside each other: a container whose start blocks (a slow image pull) holds
// back no other tenancy's container. In process, with a backend whose start of one image waits
// until the test lets it go.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <set>

#include "serve/service.h"
#include "support/fixture_host.h"

namespace tessera::serve {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

// Containers run until stopped; the start of image "slow" blocks until Release().
class GatedBackend final : public backends::ContainerBackend {
 public:
  std::string name() const override { return "gated"; }
  Status CheckIsolation(fleet::Isolation, int) const override { return Ok(); }
  Status Start(const backends::StartRequest& request, backends::ExitCallback on_exit) override {
    std::unique_lock lock(mutex_);
    if (request.image == "slow") {
      slow_started_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return released_; });
    }
    running_[request.id] = std::move(on_exit);
    return Ok();
  }
  Status Watch(const std::string& id, backends::ExitCallback on_exit) override {
    return NotFound("container " + id + " does not exist");
  }
  Status Stop(const std::string& id, std::chrono::seconds) override {
    backends::ExitCallback on_exit;
    {
      std::lock_guard lock(mutex_);
      auto it = running_.find(id);
      if (it == running_.end()) return NotFound("container " + id + " does not exist");
      on_exit = std::move(it->second);
      running_.erase(it);
    }
    on_exit(id, backends::ExitInfo{137, false, ""});
    return Ok();
  }
  Result<backends::BackendContainer> Inspect(const std::string& id) override {
    return NotFound("container " + id + " does not exist");
  }
  Result<std::string> Logs(const std::string&) override { return std::string(); }
  Result<std::vector<backends::BackendContainer>> List() override {
    return std::vector<backends::BackendContainer>{};
  }
  Status Remove(const std::string&) override { return Ok(); }

  bool WaitForSlowStart(std::chrono::milliseconds bound) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, bound, [this] { return slow_started_; });
  }
  void Release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool slow_started_ = false;
  bool released_ = false;
  std::map<std::string, backends::ExitCallback> running_;
};

class ConcurrentStarts : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = fleet::OpenSqliteStore(fleet::StoreOptions{dir_.path() + "/t.db"});
    ASSERT_TRUE(store.ok()) << store.error().message;
    auto backend = std::make_unique<GatedBackend>();
    backend_ = backend.get();
    ServiceOptions options;
    options.data_dir = dir_.path();
    options.lease_file = dir_.path() + "/leases.json";
    auto service =
        Service::Create(std::move(options), Service::Host{}, std::move(*store), std::move(backend));
    ASSERT_TRUE(service.ok()) << service.error().message;
    service_ = std::move(*service);
    service_->Start();
  }
  void TearDown() override {
    if (backend_) backend_->Release();
    if (service_) service_->Stop();
  }

  std::string Submit(const std::string& image, const std::string& tenancy) {
    fleet::ContainerSpec spec;
    spec.image = image;
    spec.tenancy = tenancy;
    std::promise<Result<SubmitResult>> answered;
    service_->Submit(admin_, spec, "",
                     [&answered](Result<SubmitResult> result) { answered.set_value(result); });
    auto result = answered.get_future().get();
    EXPECT_TRUE(result.ok()) << result.error().message;
    return result.ok() ? result->container.id : "";
  }

  // Polls with a generous bound: the machine may be loaded; only the outcome is asserted.
  fleet::ContainerState WaitForState(const std::string& id, fleet::ContainerState want) {
    fleet::ContainerState state = fleet::ContainerState::kPending;
    for (auto deadline = std::chrono::steady_clock::now() + 60s;
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(20ms)) {
      auto container = service_->GetContainer(admin_, id);
      if (!container.ok()) break;
      state = container->state;
      if (state == want) break;
    }
    return state;
  }

  TempDir dir_;
  GatedBackend* backend_ = nullptr;
  std::unique_ptr<Service> service_;
  const Caller admin_{true, "", ""};
};

TEST_F(ConcurrentStarts, ABlockedStartDoesNotHoldBackAnotherTenancysContainer) {
  const std::string slow = Submit("slow", "alpha");
  ASSERT_TRUE(backend_->WaitForSlowStart(60s));
  const std::string fast = Submit("busybox", "beta");
  EXPECT_EQ(WaitForState(fast, fleet::ContainerState::kRunning), fleet::ContainerState::kRunning);
  EXPECT_EQ(service_->GetContainer(admin_, slow)->state, fleet::ContainerState::kPending);

  // The blocked start completes into running, and a stop goes through the pool as well.
  backend_->Release();
  EXPECT_EQ(WaitForState(slow, fleet::ContainerState::kRunning), fleet::ContainerState::kRunning);
  std::promise<Result<fleet::ContainerRecord>> deleted;
  service_->DeleteContainer(admin_, fast, [&deleted](Result<fleet::ContainerRecord> result) {
    deleted.set_value(std::move(result));
  });
  ASSERT_TRUE(deleted.get_future().get().ok());
  EXPECT_EQ(WaitForState(fast, fleet::ContainerState::kExited), fleet::ContainerState::kExited);
}

TEST_F(ConcurrentStarts, StopWaitsForAStartUnderWayAndRecordsItsOutcome) {
  const std::string slow = Submit("slow", "alpha");
  ASSERT_TRUE(backend_->WaitForSlowStart(60s));
  auto stopped = std::async(std::launch::async, [this] { service_->Stop(); });
  backend_->Release();
  stopped.get();
  // The start returned after Stop began; its outcome is applied all the same.
  EXPECT_EQ(service_->GetContainer(admin_, slow)->state, fleet::ContainerState::kRunning);
}

}  // namespace
}  // namespace tessera::serve
