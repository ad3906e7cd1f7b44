#include "serve/access.h"

#include "serve/audit.h"

namespace tessera::serve {

void Access::SetAdminTokenHash(std::string sha256) {
  std::lock_guard lock(model_.mu);
  model_.admin_hash = std::move(sha256);
}

Result<Caller> Access::Authenticate(std::string_view token) const {
  if (token.empty()) return PermissionDenied("missing bearer token");
  std::string hash = fleet::Sha256Hex(token);
  std::lock_guard lock(model_.mu);
  if (!model_.admin_hash.empty() && hash == model_.admin_hash) {
    Caller admin;
    admin.admin = true;
    admin.token_id = "admin";
    admin.scope = "admin";
    return admin;
  }
  auto it = model_.tokens.find(hash);
  if (it == model_.tokens.end()) return PermissionDenied("unknown token");
  // A token acts for the incarnation it was made for, never for a later owner of the name.
  auto tenancy = model_.tenancies.find(it->second.tenancy);
  if (tenancy == model_.tenancies.end() || tenancy->second.uid != it->second.tenancy_uid)
    return PermissionDenied("unknown token");
  Caller caller;
  caller.tenancy = it->second.tenancy;
  caller.tenancy_uid = it->second.tenancy_uid;
  caller.token_id = it->second.id;
  caller.scope = "tenant";
  return caller;
}

void Access::CreateToken(const Caller& caller, const std::string& tenancy,
                         Done<CreatedToken> done) {
  if (!caller.admin) return done(PermissionDenied("only the admin token creates tokens"));
  auto secret = fleet::RandomHex(24);
  auto id = fleet::RandomHex(4);
  if (!secret || !id) return done(Internal("token: no randomness"));
  CreatedToken created;
  created.secret = "tsr_" + *secret;
  created.record.id = "t-" + *id;
  created.record.sha256 = fleet::Sha256Hex(created.secret);
  created.record.tenancy = tenancy;
  created.record.created_ms = fleet::NowMs();
  std::lock_guard lock(model_.mu);
  if (auto refused = model_.WriteRefusal(); !refused) return done(refused.error());
  auto it = model_.tenancies.find(tenancy);
  if (it == model_.tenancies.end()) return done(NotFound("tenancy " + tenancy + " not found"));
  created.record.tenancy_uid = it->second.uid;
  model_.tokens[created.record.sha256] = created.record;
  model_.Commit(
      {created.record, AuditOf(caller, {"token.create", "token", created.record.id, tenancy})},
      [done = std::move(done), created](Status status) {
        if (!status) return done(status.error());
        done(created);
      });
}

}  // namespace tessera::serve
