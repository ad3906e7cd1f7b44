#include "serve/access.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/atomic_file.h"
#include "serve/audit.h"

namespace tessera::serve {

using fleet::TokenScope;

void Access::SetAdminTokenHash(std::string sha256) {
  std::lock_guard lock(model_.mu);
  model_.admin_hash = std::move(sha256);
}

Result<Caller> Access::Authenticate(std::string_view token) {
  if (token.empty()) return PermissionDenied("missing bearer token");
  std::string hash = fleet::Sha256Hex(token);
  const int64_t now = fleet::NowMs();
  std::lock_guard lock(model_.mu);
  if (!model_.admin_hash.empty() && hash == model_.admin_hash)
    return Caller{true, "", "", "admin", TokenScope::kAdmin, ""};
  auto it = model_.tokens.find(hash);
  if (it == model_.tokens.end()) return PermissionDenied("unknown token");
  fleet::TokenRecord& record = it->second;
  if (record.expires_ms != 0 && now >= record.expires_ms)
    return PermissionDenied("token " + record.id + " expired");
  if (record.scope != TokenScope::kMetrics) {
    // A token acts for the incarnation it was made for, never for a later owner of the name.
    auto tenancy = model_.tenancies.find(record.tenancy);
    if (tenancy == model_.tenancies.end() || tenancy->second.uid != record.tenancy_uid)
      return PermissionDenied("unknown token");
  }
  record.last_used_ms = std::max(record.last_used_ms, now);
  // The exact time stays in memory; the store hears of it at most once a minute per token, so
  // requests cost no write. Skipped while the store cannot write (it is only a hint), and where
  // replicas share the cluster's store (each keeps its own, rather than rewrite Secrets).
  int64_t& flushed = flushed_ms_[record.id];
  if (!model_.options.resync && now - flushed >= kLastUsedFlushMs && model_.WriteRefusal()) {
    flushed = now;
    model_.Commit({record}, nullptr);
  }
  return Caller{false, record.tenancy, record.tenancy_uid, record.id, record.scope, ""};
}

void Access::CreateToken(const Caller& caller, const std::string& tenancy,
                         const TokenRequest& request, Done<CreatedToken> done) {
  if (!caller.admin) return done(PermissionDenied("only the admin token creates tokens"));
  if (request.scope == TokenScope::kAdmin)
    return done(InvalidArgument("scope: admin tokens are not made here (rotate the admin token)"));
  if ((request.scope == TokenScope::kMetrics) != tenancy.empty())
    return done(InvalidArgument(request.scope == TokenScope::kMetrics
                                    ? "scope: metrics tokens belong to no tenancy (POST /v1/tokens)"
                                    : "scope: tokens of a tenancy are tenant or read-only"));
  auto secret = fleet::RandomHex(24);
  auto id = fleet::RandomHex(4);
  if (!secret || !id) return done(Internal("token: no randomness"));
  CreatedToken created;
  created.secret = "tsr_" + *secret;
  created.record.id = "t-" + *id;
  created.record.sha256 = fleet::Sha256Hex(created.secret);
  created.record.tenancy = tenancy;
  created.record.created_ms = fleet::NowMs();
  created.record.scope = request.scope;
  if (request.expires_in_s > 0)
    created.record.expires_ms = created.record.created_ms + request.expires_in_s * 1000;
  std::lock_guard lock(model_.mu);
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  if (!tenancy.empty()) {
    auto it = model_.tenancies.find(tenancy);
    if (it == model_.tenancies.end()) return done(NotFound("tenancy " + tenancy + " not found"));
    created.record.tenancy_uid = it->second.uid;
  }
  for (const auto& [hash, record] : model_.tokens)
    if (record.id == created.record.id) return done(Unavailable("token: ID taken; try again"));
  model_.tokens[created.record.sha256] = created.record;
  model_.Commit(
      {created.record, AuditOf(caller, {"token.create", "token", created.record.id, tenancy})},
      [done = std::move(done), created](Status status) {
        if (!status) return done(status.error());
        done(created);
      });
}

Result<std::vector<fleet::TokenRecord>> Access::ListTokens(const Caller& caller,
                                                           const std::string& tenancy) const {
  if (!caller.admin) return PermissionDenied("only the admin token lists tokens");
  std::vector<fleet::TokenRecord> out;
  std::lock_guard lock(model_.mu);
  for (const auto& [hash, record] : model_.tokens)
    if (tenancy.empty() || record.tenancy == tenancy) out.push_back(record);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.created_ms, a.id) < std::tie(b.created_ms, b.id);
  });
  return out;
}

void Access::RevokeToken(const Caller& caller, const std::string& id,
                         Done<fleet::TokenRecord> done) {
  if (!caller.admin) return done(PermissionDenied("only the admin token revokes tokens"));
  std::lock_guard lock(model_.mu);
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  auto it = std::find_if(model_.tokens.begin(), model_.tokens.end(),
                         [&](const auto& entry) { return entry.second.id == id; });
  if (it == model_.tokens.end()) return done(NotFound("token " + id + " not found"));
  fleet::TokenRecord revoked = it->second;
  // Out of the model at once: the next request with it is refused, before the deletion is
  // durable (a crash before then brings it back, and the DELETE was never acknowledged).
  model_.tokens.erase(it);
  flushed_ms_.erase(id);
  model_.Commit(
      {fleet::TokenDeletion{id}, AuditOf(caller, {"token.revoke", "token", id, revoked.tenancy})},
      [done = std::move(done), revoked](Status status) {
        if (!status) return done(status.error());
        done(revoked);
      });
}

Result<std::string> Access::RotateAdminToken(const Caller& caller, const std::string& path) {
  if (!caller.admin) return PermissionDenied("only the admin token rotates the admin token");
  if (path.empty())
    return FailedPrecondition(
        "the admin token is not kept in a file by this service (several replicas share it "
        "through the cluster): replace the admin token Secret and restart the replicas");
  std::lock_guard rotating(rotate_mu_);
  auto secret = fleet::RandomHex(24);
  if (!secret) return secret.error();
  const std::string token = "tsa_" + *secret;
  // The file first: a new token that only this process knew would be lost with it.
  if (auto written = WriteFileAtomically(path, token + "\n", 0600); !written)
    return written.error().WithContext("admin token file");
  SetAdminTokenHash(fleet::Sha256Hex(token));
  // The token lives in its file, not the store: its record follows the rotation (a crash
  // between the two leaves a rotation without a record, never a record without a rotation).
  std::lock_guard lock(model_.mu);
  model_.Commit({AuditOf(caller, {"admin-token.rotate", "token", "admin", ""})}, [](Status status) {
    if (!status) spdlog::warn("audit: the admin token's rotation: {}", status.error().message);
  });
  return token;
}

}  // namespace tessera::serve
