// The generated v1 messages, for this module's own files only.
#pragma once

#include "podresources/v1/api.pb.h"

namespace tessera::podresources {

struct PodList;
PodList FromProto(const ::v1::ListPodResourcesResponse& response);

}  // namespace tessera::podresources
