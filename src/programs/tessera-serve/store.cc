// The store: a SQLite file under --data-dir, or the cluster's objects (every replica shares
// them; nothing of the state is in the Pod).
#include "serve/replicated_backend.h"
#include "wiring.h"

namespace tessera::serve_program {
namespace {

Store OpenClusterStore(const ServeFlags& flags, const DataDir& data, Backend& backend,
                       const std::function<bool()>& leading, serve::ServiceOptions& options) {
  k8s::ClusterStoreOptions cluster_options;
  cluster_options.client = *backend.k8s_config;
  cluster_options.ns = StateNamespace(flags);
  if (flags.leader_elect) cluster_options.leading = leading;
  auto opened = k8s::ClusterStore::Open(std::move(cluster_options));
  Store out;
  out.cluster = opened.get();
  out.admin_hash = ClusterAdminTokenHash(*out.cluster, flags, data.admin_token_path);
  out.store = std::move(opened);
  backend.backend = serve::StartAfterPlacementIsDurable(
      std::move(backend.backend), *out.cluster,
      flags.leader_elect ? std::function<bool()>(leading) : std::function<bool()>());
  options.resync = [cluster = out.cluster] { return cluster->Resync(); };
  return out;
}

Store OpenSqlite(const ServeFlags& flags, const DataDir& data, serve::ServiceOptions& options) {
  auto admin = AdminToken(data.admin_token_path);
  if (!admin) Die(admin.error().WithContext("admin token"));
  Store out;
  out.admin_hash = fleet::Sha256Hex(*admin);
  // One process owns the file: POST /v1/admin-token:rotate may replace it.
  options.admin_token_file = data.admin_token_path;
  fleet::StoreOptions store_options;
  store_options.path = data.path + "/tessera.db";
  store_options.synchronous_full = flags.synchronous_full;
  store_options.background_checkpoint = !flags.foreground_checkpoint;
  store_options.refuse_empty = data.ran_before;
  auto store = fleet::OpenSqliteStore(store_options);
  if (!store) Die(store.error());
  out.store = std::move(*store);
  return out;
}

}  // namespace

Store OpenStore(const ServeFlags& flags, const DataDir& data, Backend& backend,
                const std::function<bool()>& leading, serve::ServiceOptions& options) {
  if (data.store_kind == "cluster") return OpenClusterStore(flags, data, backend, leading, options);
  return OpenSqlite(flags, data, options);
}

}  // namespace tessera::serve_program
