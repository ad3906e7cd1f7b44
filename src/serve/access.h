// Who may call: the admin token (its hash from the admin token file) and the tokens the admin
// makes (only their hashes are kept), each with a scope and an optional expiry. Every replica
// answers these from its model. docs/serve.md "Tokens" says what each scope may do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "serve/model.h"
#include "serve/types.h"

namespace tessera::serve {

class Access {
 public:
  // A token's last use is written at most this often (the exact time is kept in memory).
  static constexpr int64_t kLastUsedFlushMs = 60000;

  explicit Access(Model& model) : model_(model) {}

  void SetAdminTokenHash(std::string sha256);
  // PermissionDenied (401 at the edge) for an unknown, revoked or expired token, or one whose
  // tenancy incarnation is gone. Records the token's use (see kLastUsedFlushMs).
  Result<Caller> Authenticate(std::string_view token);
  // A new token (admin only); its secret is shown once. Tenant and read-only tokens belong to
  // the tenancy's current incarnation; metrics tokens to none (`tenancy` empty).
  void CreateToken(const Caller& caller, const std::string& tenancy, const TokenRequest& request,
                   Done<CreatedToken> done);
  // Every token, or one tenancy's (admin only); creation order.
  Result<std::vector<fleet::TokenRecord>> ListTokens(const Caller& caller,
                                                     const std::string& tenancy) const;
  // Revokes at once: the next request with it is refused (admin only). NotFound for an
  // unknown ID. Answers once the deletion is durable.
  void RevokeToken(const Caller& caller, const std::string& id, Done<fleet::TokenRecord> done);
  // A new admin token written to `path` (atomically, 0600) and in force at once; the old one is
  // refused from the next request. Returns the new secret (shown once).
  Result<std::string> RotateAdminToken(const Caller& caller, const std::string& path);

 private:
  Model& model_;
  // Token ID -> when its last use was last handed to the store (guarded by model_.mu).
  std::unordered_map<std::string, int64_t> flushed_ms_;
  std::mutex rotate_mu_;  // one admin token rotation at a time
};

}  // namespace tessera::serve
