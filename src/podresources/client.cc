// PodResourcesLister.List over kubelet's unix socket.
#include <grpcpp/grpcpp.h>

#include "podresources/podresources.h"
#include "podresources/proto.h"
#include "podresources/v1/api.grpc.pb.h"

namespace tessera::podresources {

Result<PodList> List(const std::string& socket_path, std::chrono::milliseconds timeout) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(kMaxAnswerBytes));
  auto channel = grpc::CreateCustomChannel("unix://" + socket_path,
                                           grpc::InsecureChannelCredentials(), arguments);
  auto lister = ::v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  ::v1::ListPodResourcesResponse response;
  auto status = lister->List(&context, ::v1::ListPodResourcesRequest(), &response);
  if (!status.ok()) {
    return Unavailable("PodResources List on " + socket_path + ": " + status.error_message());
  }
  return FromProto(response);
}

}  // namespace tessera::podresources
