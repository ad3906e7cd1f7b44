// fleet::Store over the cluster (tessera-serve --backend kubernetes): every record is an object
// the API server holds (see state_objects.h), written with resourceVersion preconditions, so the
// control plane keeps nothing the cluster does not. Several replicas share it: each follows the
// objects with list+watch and hears of the records the others wrote.
//
// Who writes what: any replica creates submissions, sets their stop requests, and writes
// tenancies and tokens; only the leading replica writes a submission's status and the GPUs'
// lease records (a replica that no longer leads drops those writes and reports the live record
// instead). A 409 is answered by reading the live object and merging (MergeContainerRecords), so
// neither side's change is lost.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "fleet/fleet.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

struct ClusterStoreOptions {
  ClientConfig client;
  std::string ns = "tessera-system";  // token Secrets, admin Secret, GPU record ConfigMaps
  // Whether this replica leads at this instant; unset: always (one replica).
  std::function<bool()> leading;
  size_t max_group = 256;  // most mutations written per round of the writer
};

class ClusterStore : public fleet::Store {
 public:
  // A record another writer changed (an upsert, or a TenancyDeletion / ContainerDeletion), or
  // the live record where this replica's write was merged or dropped.
  using ChangeCallback = std::function<void(const fleet::Mutation&)>;

  static std::unique_ptr<ClusterStore> Open(ClusterStoreOptions options);

  // Starts list+watch of every kind the store writes; `on_change` runs on the watch threads.
  virtual void Follow(ChangeCallback on_change) = 0;
  // Stops the watches and reports nothing more: before whatever `on_change` calls goes away.
  virtual void Unfollow() = 0;
  // Whether every watch has listed once since Follow.
  virtual bool Synced() const = 0;
  // Waits for the writes queued so far, lists every kind again and reports every record newer
  // than the one this replica last saw (a replica taking over the lead).
  virtual Status Resync() = 0;

  // The admin token's hash in the control plane's Secret (nullopt when there is none), and
  // writing it there: over the one there with `replace`, else AlreadyExists when there is one
  // (replicas starting at once agree on the first).
  virtual Result<std::optional<std::string>> AdminTokenHash() = 0;
  virtual Status PutAdminTokenHash(const std::string& sha256, bool replace) = 0;
};

}  // namespace tessera::k8s
