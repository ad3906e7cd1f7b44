#include "dra/dra_kubelet.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "dra/health/v1alpha1/api.grpc.pb.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "pluginregistration/api.grpc.pb.h"

namespace tessera::testing {
namespace {

namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

bool IsSocket(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

std::chrono::system_clock::time_point Deadline() {
  // kubelet's DRA call timeout.
  return std::chrono::system_clock::now() + std::chrono::seconds(45);
}

template <typename Request>
void Fill(const std::vector<dra::ClaimRef>& claims, Request* request) {
  for (const auto& ref : claims) {
    auto* c = request->add_claims();
    c->set_namespace_(ref.namespace_name);
    c->set_name(ref.name);
    c->set_uid(ref.uid);
  }
}

template <typename Pb>
std::map<std::string, DraPrepareResult> PrepareWith(const std::shared_ptr<grpc::Channel>& channel,
                                                    const std::vector<dra::ClaimRef>& claims,
                                                    std::string* rpc_error) {
  auto plugin = Pb::DRAPlugin::NewStub(channel);
  typename Pb::NodePrepareResourcesRequest request;
  Fill(claims, &request);
  typename Pb::NodePrepareResourcesResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto status = plugin->NodePrepareResources(&context, request, &response);
  std::map<std::string, DraPrepareResult> out;
  if (!status.ok()) {
    if (rpc_error) *rpc_error = status.error_message();
    return out;
  }
  for (const auto& [uid, claim] : response.claims()) {
    DraPrepareResult result;
    result.error = claim.error();
    for (const auto& d : claim.devices()) {
      dra::PreparedDevice device;
      device.request_names.assign(d.request_names().begin(), d.request_names().end());
      device.pool_name = d.pool_name();
      device.device_name = d.device_name();
      device.cdi_device_ids.assign(d.cdi_device_ids().begin(), d.cdi_device_ids().end());
      result.devices.push_back(std::move(device));
    }
    out[uid] = std::move(result);
  }
  return out;
}

template <typename Pb>
std::map<std::string, std::string> UnprepareWith(const std::shared_ptr<grpc::Channel>& channel,
                                                 const std::vector<dra::ClaimRef>& claims,
                                                 std::string* rpc_error) {
  auto plugin = Pb::DRAPlugin::NewStub(channel);
  typename Pb::NodeUnprepareResourcesRequest request;
  Fill(claims, &request);
  typename Pb::NodeUnprepareResourcesResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto status = plugin->NodeUnprepareResources(&context, request, &response);
  std::map<std::string, std::string> out;
  if (!status.ok()) {
    if (rpc_error) *rpc_error = status.error_message();
    return out;
  }
  for (const auto& [uid, claim] : response.claims())
    out[uid] = claim.error();
  return out;
}

struct V1 {
  using DRAPlugin = v1::DRAPlugin;
  using NodePrepareResourcesRequest = v1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse = v1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest = v1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse = v1::NodeUnprepareResourcesResponse;
};
struct V1beta1 {
  using DRAPlugin = v1beta1::DRAPlugin;
  using NodePrepareResourcesRequest = v1beta1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse = v1beta1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest = v1beta1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse = v1beta1::NodeUnprepareResourcesResponse;
};

}  // namespace

struct DraKubelet::Channel {
  std::shared_ptr<grpc::Channel> channel;
};

DraKubelet::DraKubelet(std::string registry_dir, std::string driver,
                       std::vector<std::string> versions)
    : registry_dir_(std::move(registry_dir)),
      driver_(std::move(driver)),
      versions_(std::move(versions)) {}

DraKubelet::~DraKubelet() = default;

std::string DraKubelet::Register(std::chrono::milliseconds timeout, bool refuse,
                                 const std::string& reason) {
  std::string socket = registry_dir_ + "/" + driver_ + "-reg.sock";
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!IsSocket(socket)) {
    if (std::chrono::steady_clock::now() > until) return "no socket " + socket;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto channel = grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
  auto registration = ::pluginregistration::Registration::NewStub(channel);
  ::pluginregistration::PluginInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    auto status = registration->GetInfo(&context, ::pluginregistration::InfoRequest(), &info);
    if (!status.ok()) return "GetInfo: " + status.error_message();
  }
  // The plugin watcher's validation: type, name, a version this kubelet speaks (the plugin's
  // list order decides), and an endpoint that is a socket.
  std::string problem;
  if (info.type() != "DRAPlugin") problem = "type " + info.type() + ", want DRAPlugin";
  if (problem.empty() && info.name() != driver_) problem = "name " + info.name();
  std::string chosen;
  for (const auto& offered : info.supported_versions()) {
    if (chosen.empty() &&
        std::find(versions_.begin(), versions_.end(), offered) != versions_.end()) {
      chosen = offered;
    }
  }
  if (problem.empty() && chosen.empty()) problem = "no supported version in common";
  if (problem.empty() && !IsSocket(info.endpoint())) {
    problem = "endpoint " + info.endpoint() + " is not a socket";
  }
  if (refuse && problem.empty()) problem = reason;
  ::pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(problem.empty());
  status.set_error(problem);
  ::pluginregistration::RegistrationStatusResponse ignored;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  auto sent = registration->NotifyRegistrationStatus(&context, status, &ignored);
  if (!sent.ok()) return "NotifyRegistrationStatus: " + sent.error_message();
  if (!problem.empty()) return problem;
  endpoint_ = info.endpoint();
  version_ = chosen;
  channel_ = std::make_unique<Channel>();
  channel_->channel =
      grpc::CreateChannel("unix://" + endpoint_, grpc::InsecureChannelCredentials());
  return {};
}

std::map<std::string, DraPrepareResult> DraKubelet::Prepare(
    const std::vector<dra::ClaimRef>& claims, std::string* rpc_error) {
  if (!channel_) {
    if (rpc_error) *rpc_error = "not registered";
    return {};
  }
  if (version_ == "v1.DRAPlugin") return PrepareWith<V1>(channel_->channel, claims, rpc_error);
  return PrepareWith<V1beta1>(channel_->channel, claims, rpc_error);
}

std::map<std::string, std::string> DraKubelet::Unprepare(const std::vector<dra::ClaimRef>& claims,
                                                         std::string* rpc_error) {
  if (!channel_) {
    if (rpc_error) *rpc_error = "not registered";
    return {};
  }
  if (version_ == "v1.DRAPlugin") return UnprepareWith<V1>(channel_->channel, claims, rpc_error);
  return UnprepareWith<V1beta1>(channel_->channel, claims, rpc_error);
}

std::string DraPluginBinary() {
  return std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-dra-plugin";
}

struct DraHealthWatch::State {
  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext context;
  std::thread reader;
  mutable std::mutex mu;  // guards latest, messages, ended
  std::map<std::string, Entry> latest;
  int messages = 0;
  std::string ended;
};

DraHealthWatch::DraHealthWatch(const std::string& endpoint) : state_(std::make_unique<State>()) {
  state_->channel = grpc::CreateChannel("unix://" + endpoint, grpc::InsecureChannelCredentials());
  state_->reader = std::thread([state = state_.get()] {
    auto health = ::v1alpha1::DRAResourceHealth::NewStub(state->channel);
    auto stream =
        health->NodeWatchResources(&state->context, ::v1alpha1::NodeWatchResourcesRequest());
    ::v1alpha1::NodeWatchResourcesResponse response;
    while (stream->Read(&response)) {
      std::map<std::string, Entry> latest;
      for (const auto& device : response.devices()) {
        latest[device.device().device_name()] =
            Entry{device.device().pool_name(), static_cast<int>(device.health()),
                  device.last_updated_time(), device.health_check_timeout_seconds()};
      }
      std::lock_guard lock(state->mu);
      state->latest = std::move(latest);
      ++state->messages;
    }
    auto status = stream->Finish();
    std::lock_guard lock(state->mu);
    state->ended = status.ok() ? "OK" : status.error_message();
  });
}

DraHealthWatch::~DraHealthWatch() {
  state_->context.TryCancel();
  state_->reader.join();
}

std::map<std::string, DraHealthWatch::Entry> DraHealthWatch::Latest() const {
  std::lock_guard lock(state_->mu);
  return state_->latest;
}

int DraHealthWatch::Messages() const {
  std::lock_guard lock(state_->mu);
  return state_->messages;
}

std::string DraHealthWatch::Ended() const {
  std::lock_guard lock(state_->mu);
  return state_->ended;
}

}  // namespace tessera::testing
