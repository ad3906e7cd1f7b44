// The controllers of the Kubernetes backend: they drive the objects of objects.h through the API
// server (tenancies, the GPU lease flow and its firmware check, DRA's pinned claims).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/kubernetes/objects.h"
#include "common/error.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

// Empty when kubelet's allocation matches the lease (or was not reported), else the reason
// naming both sides.
std::string AllocationDifference(const LeaseSpec& lease);

// Creates or repairs one object: GET; 404 → POST; otherwise compares the fields tessera owns
// (labels, spec, data) and PUTs the desired object over the live one when they drifted,
// retrying a 409 conflict with a fresh GET. Returns what is live afterwards.
Result<Json> EnsureObject(Client& client, const Resource& resource, const std::string& ns,
                          const Json& desired);

// Namespace, CiliumNetworkPolicy (when `cilium`), NetworkPolicy, NFS PV/PVCs (pv mode), then
// status.phase = Ready. Idempotent.
struct TenancyControllerOptions {
  bool cilium = true;
  NfsMode nfs_mode = NfsMode::kInline;
};
Status ReconcileTenancy(Client& client, const Json& tenancy,
                        const TenancyControllerOptions& options);

// DRA: creates (or finds) request.resource_claim in `ns`, pinned to the lease's GPUs (the vfio
// class under Kata), and records its name and UID in the lease's status.claim. A failure frees
// the lease with the reason. Returns the live claim.
Result<Json> CreatePinnedClaim(Client& client, const PodRequest& request, const LeaseSpec& lease,
                               const std::string& ns);

// DRA: what the scheduler made of a lease's pinned claim. nullopt while the lease has no claim
// or the claim is not allocated (or gone); else the reason the allocation differs from the
// lease (unreadable included), empty when it is exactly the leased GPUs.
Result<std::optional<std::string>> PinnedClaimMismatch(Client& client, const Json& lease);

// Submission → GpuLease (reserved, owned by the control plane) → Pod → lease active. With
// request.resource_claim (DRA), a ResourceClaim pinned to the leased GPUs is created before the
// Pod and recorded in the lease's status.claim {name, uid}.
Result<Json> StartPod(Client& client, const PodRequest& request,
                      const std::vector<NfsEntitlement>& entitlements, const LeaseSpec& lease);

// One step of the lease state machine, from the lease and what the cluster says:
// active + pod finished/missing → checking + firmware-check Job; checking + Job succeeded →
// free; checking + Job failed → quarantined. Returns the lease's state afterwards. With a
// pinned claim: an allocation other than the leased GPUs deletes the Pod and is recorded as the
// reason; the check runs on exactly the allocated GPUs; the claim is deleted after the check.
Result<std::string> ReconcileLease(Client& client, const Json& lease,
                                   const FirmwareCheckOptions& options);

}  // namespace tessera::k8s
