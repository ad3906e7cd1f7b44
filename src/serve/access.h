// Who may call: the admin token (its hash from the admin token file) and the tenancies' tokens
// (only their hashes are kept). Every replica answers these from its model.
#pragma once

#include <string>
#include <string_view>

#include "serve/model.h"
#include "serve/types.h"

namespace tessera::serve {

class Access {
 public:
  explicit Access(Model& model) : model_(model) {}

  void SetAdminTokenHash(std::string sha256);
  // PermissionDenied (401 at the edge) for an unknown token.
  Result<Caller> Authenticate(std::string_view token) const;
  // A new token for the tenancy's current incarnation (admin only); its secret is shown once.
  void CreateToken(const Caller& caller, const std::string& tenancy, Done<CreatedToken> done);

 private:
  Model& model_;
};

}  // namespace tessera::serve
