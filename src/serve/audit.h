// The audit trail's records as the service writes them (docs/audit.md): each change a caller
// makes carries its record in the commit that makes it; a refused request's record is committed
// alone; the service's own actions (a container that ended, a stop it decided) are recorded as
// "service". The records live in the store only (fleet::Store::QueryAudit), never in the model.
#pragma once

#include <string>

#include "common/error.h"
#include "fleet/fleet.h"
#include "serve/types.h"

namespace tessera::serve {

// What a request or an action changes: its action ("container.create") and object.
struct AuditSubject {
  std::string action;
  std::string object_kind;
  std::string object_id;
  std::string tenancy;
};

// The record of a change `caller` made ("ok"), or of its refused request (`result` from
// AuditResult).
fleet::AuditRecord AuditOf(const Caller& caller, AuditSubject subject, std::string result = "ok",
                           std::string detail = "");
// The record of an action the service took on its own.
fleet::AuditRecord ServiceAudit(AuditSubject subject, std::string detail);
// "gpu.drain", "gpu.undrain", "gpu.quarantine", "gpu.release".
std::string GpuAuditAction(GpuAction action);
// An error's category as the audit trail names it: "invalid_argument", "permission_denied", ...
std::string AuditResult(const Error& error);

}  // namespace tessera::serve
