#include "serve/audit.h"

#include <algorithm>

namespace tessera::serve {

namespace {

// Details quote the service's own words (reasons, exit codes); kept short all the same.
std::string BoundedDetail(std::string detail) {
  if (detail.size() > fleet::kMaxAuditDetail) detail.resize(fleet::kMaxAuditDetail);
  return detail;
}

}  // namespace

fleet::AuditRecord AuditOf(const Caller& caller, AuditSubject subject, std::string result,
                           std::string detail) {
  fleet::AuditRecord record;
  record.time_ms = fleet::NowMs();
  record.token_id = caller.token_id;
  record.scope = fleet::TokenScopeName(caller.scope);
  record.action = std::move(subject.action);
  record.object_kind = std::move(subject.object_kind);
  record.object_id = std::move(subject.object_id);
  record.tenancy = std::move(subject.tenancy);
  record.result = std::move(result);
  record.request_id = caller.request_id;
  record.detail = BoundedDetail(std::move(detail));
  return record;
}

fleet::AuditRecord ServiceAudit(AuditSubject subject, std::string detail) {
  Caller service;
  service.token_id = "service";
  fleet::AuditRecord record = AuditOf(service, std::move(subject), "ok", std::move(detail));
  record.scope = "service";  // no token: the service's own action
  return record;
}

std::string GpuAuditAction(GpuAction action) {
  switch (action) {
    case GpuAction::kDrain:
      return "gpu.drain";
    case GpuAction::kUndrain:
      return "gpu.undrain";
    case GpuAction::kQuarantine:
      return "gpu.quarantine";
    case GpuAction::kRelease:
      return "gpu.release";
  }
  return "gpu.action";
}

std::string AuditResult(const Error& error) {
  std::string name(CategoryName(error.category));
  std::replace(name.begin(), name.end(), ' ', '_');
  return name;
}

}  // namespace tessera::serve
