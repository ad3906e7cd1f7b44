#include "deviceplugin/kubelet_emulator.h"

#include <unistd.h>

#include <map>

namespace tessera::testing {

class KubeletEmulator::Service final : public v1beta1::Registration::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    // kubelet refuses versions it does not serve.
    if (request->version() != "v1beta1") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version");
    }
    std::lock_guard lock(mutex);
    registrations[request->resource_name()].push_back(*request);
    times[request->resource_name()] = std::chrono::steady_clock::now();
    changed.notify_all();
    return grpc::Status::OK;
  }

  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<v1beta1::RegisterRequest>> registrations;
  std::map<std::string, std::chrono::steady_clock::time_point> times;
};

KubeletEmulator::KubeletEmulator(std::string socket_dir)
    : socket_dir_(std::move(socket_dir)), service_(std::make_unique<Service>()) {}

KubeletEmulator::~KubeletEmulator() {
  Stop();
}

void KubeletEmulator::Start() {
  std::string path = socket_dir_ + "/kubelet.sock";
  ::unlink(path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
}

void KubeletEmulator::Stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_.reset();
  ::unlink((socket_dir_ + "/kubelet.sock").c_str());
}

std::optional<v1beta1::RegisterRequest> KubeletEmulator::WaitForRegistration(
    const std::string& resource, int n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(service_->mutex);
  bool ok = service_->changed.wait_for(lock, timeout, [&] {
    return static_cast<int>(service_->registrations[resource].size()) >= n;
  });
  if (!ok) return std::nullopt;
  return service_->registrations[resource][n - 1];
}

int KubeletEmulator::RegistrationCount(const std::string& resource) {
  std::lock_guard lock(service_->mutex);
  return static_cast<int>(service_->registrations[resource].size());
}

std::chrono::steady_clock::time_point KubeletEmulator::LastRegistrationTime(
    const std::string& resource) {
  std::lock_guard lock(service_->mutex);
  return service_->times[resource];
}

PluginClient::PluginClient(const std::string& socket_path) {
  channel_ = grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials());
  stub_ = v1beta1::DevicePlugin::NewStub(channel_);
}

PluginClient::~PluginClient() {
  if (watch_context_) watch_context_->TryCancel();
  if (watcher_.joinable()) watcher_.join();
}

void PluginClient::Watch() {
  watch_context_ = std::make_unique<grpc::ClientContext>();
  watcher_ = std::thread([this] {
    v1beta1::Empty empty;
    auto reader = stub_->ListAndWatch(watch_context_.get(), empty);
    v1beta1::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      std::lock_guard lock(mutex_);
      lists_.push_back(response);
      last_list_time_ = std::chrono::steady_clock::now();
      changed_.notify_all();
    }
    reader->Finish();
    std::lock_guard lock(mutex_);
    ended_ = true;
    changed_.notify_all();
  });
}

std::optional<v1beta1::ListAndWatchResponse> PluginClient::WaitForList(
    const std::function<bool(const v1beta1::ListAndWatchResponse&)>& accept,
    std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  bool ok =
      changed_.wait_for(lock, timeout, [&] { return !lists_.empty() && accept(lists_.back()); });
  if (!ok) return std::nullopt;
  return lists_.back();
}

std::chrono::steady_clock::time_point PluginClient::LastListTime() {
  std::lock_guard lock(mutex_);
  return last_list_time_;
}

bool PluginClient::stream_ended() {
  std::lock_guard lock(mutex_);
  return ended_;
}

grpc::Status PluginClient::Allocate(const std::vector<std::vector<std::string>>& containers,
                                    v1beta1::AllocateResponse* response) {
  v1beta1::AllocateRequest request;
  for (const auto& ids : containers) {
    auto* container = request.add_container_requests();
    for (const auto& id : ids)
      container->add_devices_ids(id);
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return stub_->Allocate(&context, request, response);
}

grpc::Status PluginClient::Preferred(const std::vector<std::string>& available,
                                     const std::vector<std::string>& must_include, int size,
                                     std::vector<std::string>* chosen) {
  v1beta1::PreferredAllocationRequest request;
  auto* container = request.add_container_requests();
  for (const auto& id : available)
    container->add_available_deviceids(id);
  for (const auto& id : must_include)
    container->add_must_include_deviceids(id);
  container->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status status = stub_->GetPreferredAllocation(&context, request, &response);
  if (status.ok() && response.container_responses_size() == 1) {
    chosen->assign(response.container_responses(0).deviceids().begin(),
                   response.container_responses(0).deviceids().end());
  }
  return status;
}

std::string HealthOf(const v1beta1::ListAndWatchResponse& list, const std::string& id) {
  for (const auto& device : list.devices()) {
    if (device.id() == id) return device.health();
  }
  return "";
}

bool AllHealthy(const v1beta1::ListAndWatchResponse& list) {
  for (const auto& device : list.devices()) {
    if (device.health() != "Healthy") return false;
  }
  return list.devices_size() > 0;
}

}  // namespace tessera::testing
