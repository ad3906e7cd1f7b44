// The operator verbs' tables (`tessera tenancy`, `token`, `gpus`, `audit`) from the API's answers.
// Pure, and tested with hostile documents: every answer comes from whatever listens at --server,
// so cells go through Cell (printable ASCII, bounded), and a document that is not the listing
// asked for is Unavailable (exit 4, as an answer that is not JSON).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client/output.h"
#include "common/error.h"

namespace tessera::client {

// GET /v1/tenancies ({"tenancies": [...]}) or one tenancy (GET or PUT /v1/tenancies/{name}):
// NAME WEIGHT QUOTA-GPUS QUOTA-PENDING MAX-PRIORITY REQUEUE AGE; wide: UID RATE-LIMIT LABELS.
// A null quota is "unlimited".
Result<Table> TenancyTable(const nlohmann::json& doc, int64_t now_ms);

// GET /v1/tokens ({"tokens": [...]}) or one token (a revoked one):
// ID SCOPE TENANCY AGE LAST-USED EXPIRES; wide: CREATED. LAST-USED is an age or "never",
// EXPIRES a time, "never", or "expired".
Result<Table> TokenTable(const nlohmann::json& doc, int64_t now_ms);
// A token just made (POST .../tokens): ID SCOPE TENANCY EXPIRES TOKEN.
Result<Table> CreatedTokenTable(const nlohmann::json& doc);
// The secret of a token just made, for `token create -q`: printed whole for a script to keep, so
// it must be 16 to 512 printable ASCII characters without spaces, else Unavailable.
Result<std::string> CreatedTokenSecret(const nlohmann::json& doc);

// GET /v1/gpus ({"gpus": [...]}) or one GPU (an action's answer):
// ID NODE MODEL STATE TENANCY CONTAINER HEALTH REASON; wide: PCI FAULTS LAST-FAULT. REASON is
// the GPU's own (a drain's, a quarantine's), else its health's. FAULTS: 0 for a GPU with no
// latest fault, else its health's fault_count, else (a server that lists none) its count in
// `fault_counts` (by GPU ID, from GET /v1/gpus/{id}'s history), else "?".
Result<Table> GpuTable(const nlohmann::json& doc,
                       const std::map<std::string, size_t>& fault_counts);
// The IDs of the listed GPUs that have a latest fault but no fault_count (whose history is worth
// asking for), at most `max`; IDs that could not be sent in a path are left out.
std::vector<std::string> GpusWithFaults(const nlohmann::json& doc, size_t max);
// The number of faults in GET /v1/gpus/{id}'s health history; nullopt when it has none.
std::optional<size_t> FaultHistoryCount(const nlohmann::json& gpu);

// The audit records gathered from GET /v1/audit ({"records": [...]}):
// SEQ TIME TOKEN ACTION OBJECT TENANCY RESULT DETAIL; wide: REQUEST.
Result<Table> AuditTable(const nlohmann::json& doc);

}  // namespace tessera::client
