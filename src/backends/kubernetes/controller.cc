// Tenancy and GPU lease controllers. Both are level-triggered and idempotent: each call looks at
// what is live and moves it one step towards what should be, so a restart or a missed watch
// event only delays convergence.
#include "backends/kubernetes/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

#include "backends/kubernetes/claims.h"
#include "backends/kubernetes/objects.h"
#include "kubernetes/client.h"

namespace tessera::k8s {
namespace {

// status.allocatedDevices bounds (kubelet gives a container at most a node's devices).
constexpr size_t kMaxAllocatedDevices = 64;
constexpr size_t kMaxDeviceIdBytes = 256;

// Every field of `desired` is present and equal in `live` (the API server adds defaults and
// metadata, which must not count as drift).
bool Contains(const Json& live, const Json& desired) {
  if (desired.is_object()) {
    if (!live.is_object()) return false;
    for (auto it = desired.begin(); it != desired.end(); ++it) {
      auto found = live.find(it.key());
      if (found == live.end() || !Contains(*found, it.value())) return false;
    }
    return true;
  }
  if (desired.is_array()) {
    if (!live.is_array() || live.size() != desired.size()) return false;
    for (size_t i = 0; i < desired.size(); ++i) {
      if (!Contains(live[i], desired[i])) return false;
    }
    return true;
  }
  return live == desired;
}

bool Drifted(const Json& live, const Json& desired) {
  for (auto it = desired.begin(); it != desired.end(); ++it) {
    if (it.key() == "apiVersion" || it.key() == "kind" || it.key() == "status") continue;
    if (it.key() == "metadata") {
      for (const char* field : {"labels", "annotations"}) {
        if (it.value().contains(field) &&
            !Contains(live["metadata"].value(field, Json::object()), it.value()[field]))
          return true;
      }
      continue;
    }
    if (!live.contains(it.key()) || !Contains(live[it.key()], it.value())) return true;
  }
  return false;
}

std::string Now() {
  std::time_t t = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buffer;
}

std::vector<NfsEntitlement> EntitlementsOf(const Json& tenancy) {
  std::vector<NfsEntitlement> out;
  const Json& nfs = tenancy.value("spec", Json::object())
                        .value("storage", Json::object())
                        .value("nfs", Json::array());
  for (const auto& item : nfs) {
    if (!item.is_object()) continue;
    out.push_back({item.value("name", ""), item.value("server", ""), item.value("path", ""),
                   item.value("readOnly", false)});
  }
  return out;
}

Status PatchLeaseStatus(Client& client, const std::string& lease, const std::string& state,
                        const std::string& reason, const std::string& job = "") {
  Json status = {{"state", state}, {"reason", reason}, {"lastTransitionTime", Now()}};
  if (!job.empty()) status["checkJob"] = job;
  auto result = client.Patch(Resource::GpuLeases(), "", lease, {{"status", status}},
                             PatchType::kMerge, "status");
  if (!result) return result.error();
  return Ok();
}

LeaseSpec LeaseSpecOf(const Json& lease) {
  LeaseSpec spec;
  spec.name = lease["metadata"].value("name", "");
  const Json& s = lease.value("spec", Json::object());
  spec.tenancy = s.value("tenancy", "");
  spec.node = s.value("node", "");
  for (const auto& id : s.value("gpuIds", Json::array())) {
    if (id.is_string()) spec.gpu_ids.push_back(id.get<std::string>());
  }
  spec.resource = s.value("resource", "nvidia.com/gpu");
  const Json& pod = s.value("podRef", Json::object());
  spec.pod_namespace = pod.value("namespace", "");
  spec.pod_name = pod.value("name", "");
  const Json& claim = lease.value("status", Json::object()).value("claim", Json::object());
  if (claim.is_object()) {
    spec.claim_name = claim.value("name", "");
    spec.claim_uid = claim.value("uid", "");
  }
  // Written by the node agent from kubelet's answer: bounded like any outside input.
  const Json& allocated =
      lease.value("status", Json::object()).value("allocatedDevices", Json::array());
  if (allocated.is_array() && allocated.size() <= kMaxAllocatedDevices) {
    for (const auto& id : allocated) {
      if (id.is_string() && !id.get<std::string>().empty() &&
          id.get<std::string>().size() <= kMaxDeviceIdBytes)
        spec.allocated_devices.push_back(id.get<std::string>());
    }
  }
  return spec;
}

std::string JoinIds(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids)
    out += (out.empty() ? "" : ",") + id;
  return "[" + out + "]";
}

// DRA: the pinned claim's allocation, when the scheduler has written one. `mismatch` gets why
// it differs from the lease (or why it cannot be read), else stays empty.
Result<std::optional<ClaimAllocation>> PinnedAllocation(Client& client, const LeaseSpec& spec,
                                                        std::string* mismatch) {
  auto claim = client.Get(ResourceClaims(), spec.pod_namespace, spec.claim_name);
  if (!claim) {
    if (claim.error().category == ErrorCategory::kNotFound) return std::optional<ClaimAllocation>();
    return claim.error();
  }
  auto allocation = ClaimAllocationOf(*claim);
  if (!allocation) {
    *mismatch = allocation.error().message;
    return std::optional<ClaimAllocation>();
  }
  if (!allocation->allocated) return std::optional<ClaimAllocation>();
  PinnedClaim pinned{spec.claim_name, spec.pod_namespace, spec.node, spec.gpu_ids,
                     false,           spec.name};
  *mismatch = AllocationMismatch(pinned, *allocation);
  return std::optional<ClaimAllocation>(std::move(*allocation));
}

// The lease as its firmware check sees it: with DRA, exactly the devices the claim was
// allocated (the leased ones when it never was); otherwise the leased and kubelet's devices.
Result<LeaseSpec> CheckedLease(Client& client, const LeaseSpec& spec, std::string* mismatch) {
  if (spec.claim_name.empty()) return spec;
  auto allocation = PinnedAllocation(client, spec, mismatch);
  if (!allocation) return allocation.error();
  LeaseSpec checked = spec;
  checked.allocated_devices.clear();
  if (*allocation) {
    auto allocated = AllocatedPciAddresses(**allocation);
    if (!allocated.empty()) checked.gpu_ids = std::move(allocated);
  }
  return checked;
}

}  // namespace

std::string AllocationDifference(const LeaseSpec& lease) {
  if (lease.allocated_devices.empty()) return {};
  std::vector<std::string> leased = lease.gpu_ids, allocated = lease.allocated_devices;
  std::sort(leased.begin(), leased.end());
  std::sort(allocated.begin(), allocated.end());
  allocated.erase(std::unique(allocated.begin(), allocated.end()), allocated.end());
  if (leased == allocated) return {};
  return "kubelet allocated " + JoinIds(allocated) + " but the lease names " + JoinIds(leased);
}

Result<Json> EnsureObject(Client& client, const Resource& resource, const std::string& ns,
                          const Json& desired) {
  const std::string name = desired["metadata"].value("name", "");
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto live = client.Get(resource, ns, name);
    if (!live) {
      if (live.error().category != ErrorCategory::kNotFound) return live.error();
      auto created = client.Create(resource, ns, desired);
      if (created) return created;
      if (created.error().category == ErrorCategory::kAlreadyExists) continue;  // raced
      return created.error();
    }
    if (!Drifted(*live, desired)) return live;
    Json replacement = desired;
    replacement["metadata"]["resourceVersion"] = (*live)["metadata"].value("resourceVersion", "");
    spdlog::debug("k8s: {} {}/{} drifted, replacing", resource.plural, ns, name);
    auto replaced = client.Replace(resource, ns, name, replacement);
    if (replaced) return replaced;
    // 409 Conflict: someone wrote in between; read again and retry.
    if (replaced.error().category != ErrorCategory::kFailedPrecondition) return replaced.error();
  }
  return FailedPrecondition(resource.plural + " " + name + ": still conflicting after 4 attempts");
}

Status ReconcileTenancy(Client& client, const Json& tenancy,
                        const TenancyControllerOptions& options) {
  const std::string object_name = tenancy["metadata"].value("name", "");
  std::string name = tenancy.value("spec", Json::object()).value("name", object_name);
  auto ns = TenantNamespace(name);
  auto fail = [&](const Error& error) -> Status {
    Json status = {{"status", {{"phase", "Pending"}, {"message", error.message}}}};
    (void)client.Patch(Resource::Tenancies(), "", object_name, status, PatchType::kMerge, "status");
    return error;
  };
  if (!ns) return fail(ns.error());
  auto entitlements = EntitlementsOf(tenancy);
  if (auto r = EnsureObject(client, Resource::Namespaces(), "", BuildNamespace(name)); !r)
    return fail(r.error());
  if (options.cilium) {
    if (auto r = EnsureObject(client, Resource::CiliumNetworkPolicies(), *ns,
                              BuildCiliumNetworkPolicy(name, entitlements));
        !r)
      return fail(r.error());
  }
  if (auto r = EnsureObject(client, Resource::NetworkPolicies(), *ns,
                            BuildNetworkPolicy(name, entitlements));
      !r)
    return fail(r.error());
  if (options.nfs_mode == NfsMode::kPersistentVolume) {
    for (const auto& e : entitlements) {
      if (auto r = EnsureObject(client, Resource::PersistentVolumes(), "",
                                BuildNfsPersistentVolume(name, e));
          !r)
        return fail(r.error());
      if (auto r = EnsureObject(client, Resource::PersistentVolumeClaims(), *ns,
                                BuildNfsPersistentVolumeClaim(name, e));
          !r)
        return fail(r.error());
    }
  }
  const Json& status = tenancy.value("status", Json::object());
  int64_t generation = tenancy["metadata"].value("generation", int64_t(0));
  if (status.value("phase", "") == "Ready" && status.value("namespace", "") == *ns &&
      status.value("observedGeneration", int64_t(-1)) == generation)
    return Ok();
  Json patch = {{"status",
                 {{"phase", "Ready"},
                  {"namespace", *ns},
                  {"message", ""},
                  {"observedGeneration", generation}}}};
  auto patched =
      client.Patch(Resource::Tenancies(), "", object_name, patch, PatchType::kMerge, "status");
  if (!patched) return patched.error();
  return Ok();
}

Result<std::optional<std::string>> PinnedClaimMismatch(Client& client, const Json& lease) {
  LeaseSpec spec = LeaseSpecOf(lease);
  if (spec.claim_name.empty()) return std::optional<std::string>();
  std::string mismatch;
  auto allocation = PinnedAllocation(client, spec, &mismatch);
  if (!allocation) return allocation.error();
  // An unreadable allocation is a mismatch too; an unallocated claim is not decided yet.
  if (!mismatch.empty() || *allocation) return std::optional<std::string>(mismatch);
  return std::optional<std::string>();
}

Result<Json> CreatePinnedClaim(Client& client, const PodRequest& request, const LeaseSpec& lease,
                               const std::string& ns) {
  PinnedClaim pinned{request.resource_claim,
                     ns,
                     lease.node,
                     lease.gpu_ids,
                     request.isolation == Isolation::kKata,
                     lease.name};
  auto claim = client.Create(ResourceClaims(), ns, BuildPinnedClaim(pinned));
  if (!claim && claim.error().category == ErrorCategory::kAlreadyExists)
    claim = client.Get(ResourceClaims(), ns, request.resource_claim);
  if (!claim) {
    (void)PatchLeaseStatus(client, lease.name, "free",
                           "claim create failed: " + claim.error().message);
    return claim.error();
  }
  Json recorded = {
      {"status",
       {{"claim",
         {{"name", request.resource_claim}, {"uid", (*claim)["metadata"].value("uid", "")}}}}}};
  auto patched =
      client.Patch(Resource::GpuLeases(), "", lease.name, recorded, PatchType::kMerge, "status");
  if (!patched) return patched.error();
  return claim;
}

Result<Json> StartPod(Client& client, const PodRequest& request,
                      const std::vector<NfsEntitlement>& entitlements, const LeaseSpec& lease) {
  // Build first: a refused volume must not leave a lease behind.
  auto pod = BuildPod(request, entitlements);
  if (!pod) return pod.error();
  auto created = client.Create(Resource::GpuLeases(), "", BuildGpuLease(lease));
  if (!created && created.error().category != ErrorCategory::kAlreadyExists) return created.error();
  if (auto s = PatchLeaseStatus(client, lease.name, "reserved", "pod " + request.name + " created");
      !s)
    return s.error();
  auto ns = (*pod)["metadata"].value("namespace", "");
  if (!request.resource_claim.empty()) {
    // DRA: the claim pins the leased GPUs before the Pod that references it exists.
    if (auto claim = CreatePinnedClaim(client, request, lease, ns); !claim) return claim.error();
  }
  auto live = client.Create(Resource::Pods(), ns, *pod);
  if (!live) {
    if (live.error().category != ErrorCategory::kAlreadyExists) {
      (void)PatchLeaseStatus(client, lease.name, "free",
                             "pod create failed: " + live.error().message);
      return live.error();
    }
    live = client.Get(Resource::Pods(), ns, request.name);
    if (!live) return live.error();
  }
  if (auto s = PatchLeaseStatus(client, lease.name, "active", "pod " + ns + "/" + request.name); !s)
    return s.error();
  return live;
}

namespace {

// An active lease: stays active while its Pod runs (recording how kubelet's or the scheduler's
// allocation differs from the lease, and deleting a Pod whose pinned claim got other GPUs);
// once the Pod finished or is gone, its firmware check Job starts and the lease is checking.
Result<std::string> ReconcileActiveLease(Client& client, const Json& lease, const LeaseSpec& spec,
                                         const FirmwareCheckOptions& options) {
  // The device plugin path: kubelet picks the IDs, so a difference from the lease is recorded
  // as soon as the node agent reports it, and the check below covers both sides.
  std::string difference = AllocationDifference(spec);
  // The DRA path: the scheduler allocates the pinned claim; anything but the leased GPUs fails
  // the container (its Pod is deleted) and is recorded.
  std::string mismatch;
  auto checked = CheckedLease(client, spec, &mismatch);
  if (!checked) return checked.error();
  if (!mismatch.empty()) difference = mismatch;
  auto pod = client.Get(Resource::Pods(), spec.pod_namespace, spec.pod_name);
  std::string why;
  if (!pod) {
    if (pod.error().category != ErrorCategory::kNotFound) return pod.error();
    why = "pod " + spec.pod_name + " gone";
  } else {
    std::string phase = (*pod).value("status", Json::object()).value("phase", "");
    if (phase != "Succeeded" && phase != "Failed" && !mismatch.empty()) {
      spdlog::warn("k8s: lease {}: {}; deleting pod {}/{}", spec.name, mismatch, spec.pod_namespace,
                   spec.pod_name);
      auto deleted = client.Delete(Resource::Pods(), spec.pod_namespace, spec.pod_name);
      if (!deleted && deleted.error().category != ErrorCategory::kNotFound) return deleted.error();
      if (auto s = PatchLeaseStatus(client, spec.name, "active", mismatch); !s) return s.error();
      return std::string("active");
    }
    if (phase != "Succeeded" && phase != "Failed") {
      if (!difference.empty() &&
          lease.value("status", Json::object()).value("reason", "") != difference) {
        spdlog::warn("k8s: lease {}: {}", spec.name, difference);
        if (auto s = PatchLeaseStatus(client, spec.name, "active", difference); !s)
          return s.error();
      }
      return std::string("active");
    }
    why = "pod " + spec.pod_name + " " + phase;
  }
  if (!difference.empty()) why += "; " + difference;
  auto job = EnsureObject(client, Resource::Jobs(), options.namespace_,
                          BuildFirmwareCheckJob(*checked, options));
  if (!job) return job.error();
  if (auto s = PatchLeaseStatus(client, spec.name, "checking", why + "; firmware check running",
                                FirmwareCheckJobName(spec.name));
      !s)
    return s.error();
  return std::string("checking");
}

// A lease under check: its Job (created again when missing) decides free or quarantined, and
// the pinned claim goes once the check is over.
Result<std::string> ReconcileCheckingLease(Client& client, const LeaseSpec& spec,
                                           const FirmwareCheckOptions& options) {
  const std::string job_name = FirmwareCheckJobName(spec.name);
  auto job = client.Get(Resource::Jobs(), options.namespace_, job_name);
  if (!job) {
    if (job.error().category != ErrorCategory::kNotFound) return job.error();
    std::string mismatch;
    auto checked = CheckedLease(client, spec, &mismatch);
    if (!checked) return checked.error();
    auto created = client.Create(Resource::Jobs(), options.namespace_,
                                 BuildFirmwareCheckJob(*checked, options));
    if (!created && created.error().category != ErrorCategory::kAlreadyExists)
      return created.error();
    return std::string("checking");
  }
  const Json& status = (*job).value("status", Json::object());
  std::string next;
  std::string reason;
  if (status.value("succeeded", 0) > 0) {
    next = "free";
    reason = "firmware check passed";
  } else if (status.value("failed", 0) > 0) {
    next = "quarantined";
    reason = "firmware check failed (job " + job_name + ")";
  } else {
    return std::string("checking");
  }
  if (auto s = PatchLeaseStatus(client, spec.name, next, reason, job_name); !s) return s.error();
  if (next == "free") (void)client.Delete(Resource::Jobs(), options.namespace_, job_name);
  // The Pod is gone and its devices were checked: the pinned claim has served its purpose.
  if (!spec.claim_name.empty()) {
    auto deleted = client.Delete(ResourceClaims(), spec.pod_namespace, spec.claim_name);
    if (!deleted && deleted.error().category != ErrorCategory::kNotFound)
      spdlog::warn("k8s: lease {}: delete claim {}: {}", spec.name, spec.claim_name,
                   deleted.error().message);
  }
  return next;
}

}  // namespace

Result<std::string> ReconcileLease(Client& client, const Json& lease,
                                   const FirmwareCheckOptions& options) {
  LeaseSpec spec = LeaseSpecOf(lease);
  std::string state = lease.value("status", Json::object()).value("state", "reserved");
  if (state == "active") return ReconcileActiveLease(client, lease, spec, options);
  if (state == "checking") return ReconcileCheckingLease(client, spec, options);
  return state;
}

}  // namespace tessera::k8s
