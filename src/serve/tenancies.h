// Tenancy administration: the records (admin writes, a tenancy's own token reads its own), storage
// entitlements, and the backend's per-tenancy objects (network, NFS volumes).
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"
#include "serve/model.h"
#include "serve/types.h"

namespace tessera::serve {

class Tenancies {
 public:
  Tenancies(Model& model, backends::ContainerBackend& backend) : model_(model), backend_(backend) {}

  void Put(const Caller& caller, fleet::Tenancy tenancy, Done<fleet::Tenancy> done);
  Result<fleet::Tenancy> Get(const Caller& caller, const std::string& name) const;
  std::vector<fleet::Tenancy> List(const Caller& caller) const;
  // Setting entitlements creates the tenancy when missing, like Put.
  void PutStorage(const Caller& caller, const std::string& tenancy,
                  tenancy::StorageEntitlements storage, Done<tenancy::StorageEntitlements> done);
  Result<tenancy::StorageEntitlements> GetStorage(const Caller& caller,
                                                  const std::string& tenancy) const;
  // Metered GPU-seconds in the query's window: the admin (every incarnation of the name, its
  // history included) or the tenancy's own token (its incarnation).
  Result<UsageReport> Usage(const Caller& caller, const std::string& tenancy,
                            const UsageQuery& query) const;
  // Blocks on the backend.
  Status Prepare(const std::string& tenancy);
  // Refused while a container of it has not ended; removes its ended containers from the
  // backend, then its network and volumes, then the record and its tokens. Blocks on the backend.
  Status Delete(const Caller& caller, const std::string& tenancy);

 private:
  Model& model_;
  backends::ContainerBackend& backend_;
};

}  // namespace tessera::serve
