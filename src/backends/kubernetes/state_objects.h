// The control plane's records as cluster objects (--backend kubernetes keeps its state in the
// cluster): a submission is a GpuContainer (spec = what was asked, status = what became of it),
// a tenancy token is a Secret in the control plane's namespace holding the token's SHA-256, and
// the admin token's hash is one more Secret there. Pure: records in, objects out, and back, with
// every field read from the cluster checked and bounded.
#pragma once

#include <string>

#include "backends/kubernetes/kubernetes.h"
#include "common/error.h"
#include "fleet/fleet.h"

namespace tessera::k8s {

inline constexpr const char* kIdempotencyLabel = "tessera.dev/idempotency-key-hash";
inline constexpr const char* kTokenSecretLabel = "tessera.dev/token";
inline constexpr const char* kAdminTokenSecret = "tessera-admin-token";

// The ID (and GpuContainer name) of a submission with an Idempotency-Key: derived from the
// tenancy's incarnation and the key, so two replicas accepting the same retried request at once
// write the same object and the API server's AlreadyExists keeps the key unique per tenancy.
// "c-" + 16 hex digits, as a random ID.
std::string IdempotentContainerId(const std::string& tenancy_uid, const std::string& key);

Json GpuContainerObject(const fleet::ContainerRecord& container);
// InvalidArgument naming the field when the object is not one this control plane writes.
Result<fleet::ContainerRecord> ContainerRecordOf(const Json& object);

// Secret "tessera-token-<id>" with entries sha256, tenancy, tenancyUid, created (base64 in data).
Json TokenSecret(const fleet::TokenRecord& token, const std::string& ns);
Result<fleet::TokenRecord> TokenRecordOf(const Json& secret);
// Secret tessera-admin-token with the entry sha256.
Json AdminTokenSecret(const std::string& sha256, const std::string& ns);
Result<std::string> AdminTokenHashOf(const Json& secret);

}  // namespace tessera::k8s
