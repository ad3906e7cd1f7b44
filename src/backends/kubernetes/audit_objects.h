// The audit trail as cluster objects (tessera-serve --backend kubernetes): one ConfigMap per
// record in the control plane's namespace, labelled tessera.dev/audit=record and with label-safe
// forms of its tenancy and action, so that a list selects on them. Its name carries its sequence
// number: the record's time (Unix ms) times 10^6 plus a number drawn from the record's content,
// 19 digits, so names sort as records do in time, and a record written again (a retried commit)
// has the name it had and is not written twice. Pure: records in, objects out, and back, with
// every entry read from the cluster checked and bounded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "fleet/fleet.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

inline constexpr const char* kAuditLabel = "tessera.dev/audit";  // = "record"
inline constexpr const char* kAuditTenancyLabel = "tessera.dev/audit-tenancy";
inline constexpr const char* kAuditActionLabel = "tessera.dev/audit-action";
inline constexpr int64_t kAuditSeqPerMs = 1'000'000;

// The record's sequence number; `probe` > 0 gives the next candidates when another record of the
// same millisecond has the name already.
int64_t AuditSeqOf(const fleet::AuditRecord& record, int probe = 0);
// "tessera-audit-<seq, 19 digits>", and back (nullopt for any other name).
std::string AuditConfigMapName(int64_t seq);
std::optional<int64_t> AuditSeqOfName(std::string_view name);
// A label value for `text`: itself when it is one (at most 63 of [A-Za-z0-9._-], alphanumeric at
// both ends), else "h-" and 40 hex digits of its SHA-256. The record keeps the real value.
std::string AuditLabelValue(std::string_view text);
// The label selector of `query`'s tenancy and action (the exact values are compared after).
std::string AuditSelector(const fleet::AuditQuery& query);

Json AuditConfigMap(const fleet::AuditRecord& record, int64_t seq, const std::string& ns);
// InvalidArgument naming the entry when the ConfigMap is not one this control plane writes.
Result<fleet::AuditEntry> AuditEntryOf(const Json& config_map);

}  // namespace tessera::k8s
