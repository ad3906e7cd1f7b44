// Published ports and readiness in API bodies: POST /v1/containers `ports` and `ready` (strict,
// every problem naming its field) and a record's `ports` as the API answers them.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "fleet/fleet.h"

namespace tessera::api {

// `ports: [{containerPort, name?, protocol?}]`: at most fleet::kMaxPortsPerContainer entries,
// containerPort 1..65535, protocol tcp (default) or udp, name a DNS-1123 label of at most 15
// characters with a letter (a Kubernetes Service port's name), unique containerPort+protocol
// and unique names.
Result<std::vector<fleet::PortRequest>> ParsePortRequests(const nlohmann::json& value);
// `ready: {httpGet: {path?, port}}`: path starts with '/', printable ASCII, at most 256 bytes.
Result<fleet::ReadinessProbe> ParseReadinessProbe(const nlohmann::json& value);
// What `ports` and `ready` say together with the rest: ports need the tenancy network, and the
// probe's port is one of the container's tcp ports.
Status CheckPortsOfSpec(const fleet::ContainerSpec& spec);

// A record's `ports`: one entry per spec port, the host side filled in once known ("" / 0
// before), with `address` "HOST:PORT" once both are known.
nlohmann::json PublishedPortsToJson(const fleet::ContainerRecord& record);

}  // namespace tessera::api
