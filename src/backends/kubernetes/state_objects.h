// The control plane's records as cluster objects (--backend kubernetes keeps its state in the
// cluster): a submission is a GpuContainer (spec = what was asked, status = what became of it),
// a tenancy is a Tenancy (the record in an annotation; spec = its NFS entitlements, which the
// tenancy controller reconciles), a tenancy token is a Secret in the control plane's namespace
// holding the token's SHA-256, the admin token's hash is one more Secret there, and the GPUs'
// lease records are one ConfigMap per node there (the GpuLease of each container stays the
// backend's). Pure: records in, objects out, and back, with
// every field read from the cluster checked and bounded.
#pragma once

#include <string>

#include "common/error.h"
#include "fleet/fleet.h"
#include "kubernetes/client.h"

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

// Secret "tessera-token-<id>" with entries sha256, tenancy, tenancyUid, created, scope and expires
// (base64 in data; a Secret without scope holds a tenancy token that never expires). Its last use
// is kept by each replica in memory, not in the Secret.
std::string TokenSecretName(const std::string& token_id);
std::string TokenIdOfSecretName(const std::string& name);
Json TokenSecret(const fleet::TokenRecord& token, const std::string& ns);
Result<fleet::TokenRecord> TokenRecordOf(const Json& secret);
// Secret tessera-admin-token with the entry sha256.
Json AdminTokenSecret(const std::string& sha256, const std::string& ns);
Result<std::string> AdminTokenHashOf(const Json& secret);

// Tenancy "<name>": annotation tessera.dev/record = {"uid","created","labels","extensions"}.
inline constexpr const char* kTenancyRecordAnnotation = "tessera.dev/record";
Json TenancyObject(const fleet::Tenancy& tenancy);
// InvalidArgument naming the field; NotFound for a Tenancy without the record (made by hand).
Result<fleet::Tenancy> TenancyRecordOf(const Json& object);

// ConfigMap "tessera-gpus-<node>" (hashed when the name would be too long) labelled
// tessera.dev/gpu-records=<node's hash>, one data entry per GPU keyed by its PCI address with ':'
// as '_' (ConfigMap keys allow [-._a-zA-Z0-9]).
inline constexpr const char* kGpuRecordsLabel = "tessera.dev/gpu-records";
std::string GpuRecordsName(const std::string& node);
std::string GpuRecordKey(const std::string& pci_address);
std::string GpuRecordText(const fleet::GpuRecord& gpu);
Json GpuRecordsObject(const std::string& node, const std::string& ns);
// Every GPU record of one ConfigMap; an entry that does not parse is an error naming its key.
Result<std::vector<fleet::GpuRecord>> GpuRecordsOf(const Json& config_map);

// ConfigMap "tessera-usage-<container ID>-<start, Unix ms>" labelled tessera.dev/usage=container
// and with its tenancy's label: one run's metered GPU time, written once and never replaced.
// Billing outlives the GpuContainer (retention deletes it) and its tenancy. Entries: container,
// tenancy, tenancyUid, gpus, started and finished (RFC 3339, milliseconds), gpuModel and mode; and
// what the run was measured to use, when it was: smSeconds, memoryGibSeconds, energyJoules.
inline constexpr const char* kUsageLabel = "tessera.dev/usage";
// {smSeconds, memoryGibSeconds, energyJoules} under `key` of `object` (a GpuContainer's status,
// a GpuLease's status.measured as the node agent writes it): finite and not negative; absent =
// zeros. Errors name `field`.
Result<fleet::MeasuredUsage> MeasuredOf(const Json& object, const std::string& key,
                                        const std::string& field);
std::string UsageConfigMapName(const fleet::UsageRecord& usage);
Json UsageConfigMap(const fleet::UsageRecord& usage, const std::string& ns);
// InvalidArgument naming the entry when it is not one this control plane writes.
Result<fleet::UsageRecord> UsageRecordOf(const Json& config_map);

// ConfigMap "tessera-retired-<container ID>" labelled tessera.dev/retired=container: a container
// ID retention removed, never to be given again (fleet::ContainerDeletion's tombstone). Entry:
// container.
inline constexpr const char* kRetiredLabel = "tessera.dev/retired";
Json RetiredIdConfigMap(const std::string& container_id, const std::string& ns);
Result<std::string> RetiredIdOf(const Json& config_map);

}  // namespace tessera::k8s
