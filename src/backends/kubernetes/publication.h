// A container's published ports through the API server (published.h builds the objects): its
// Service and ingress policies are created before its Pod, owned by the Pod once it exists (the
// garbage collector deletes them with it) and deleted explicitly with the container; Exposed
// reads the Service and the Pod back.
#pragma once

#include <string>

#include "backends/backend.h"
#include "backends/kubernetes/published.h"
#include "common/error.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

// The Service, and the ingress policies when `publication.ingress` names a source (the
// CiliumNetworkPolicy too with `cilium`). An object of that name already there is kept (an
// earlier attempt of the same container's start).
Status CreatePublication(Client& client, const Publication& publication, bool cilium);
// Makes the Pod (name, uid) the owner of the Service and policies; best effort (logged): they
// are deleted with the container either way.
void AdoptPublication(Client& client, const Publication& publication, bool cilium,
                      const std::string& pod_uid);
// Deletes the Service and policies of Pod `pod_name` in `ns` (those not there are fine).
Status DeletePublication(Client& client, const std::string& ns, const std::string& pod_name,
                         bool cilium);
// Deletes every Service and policy labelled with `label_selector` in any namespace (a container
// whose Pod is already gone).
Status DeletePublicationsLabelled(Client& client, const std::string& label_selector, bool cilium);

// Where the Pod's published ports are reached (from its Service; addresses unknown while there is
// none) and whether the Pod is Ready. The Service's answer is bounded in size and checked field
// by field.
Result<backends::Exposure> ReadExposure(Client& client, const Json& pod);

}  // namespace tessera::k8s
