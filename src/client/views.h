// The rows of the read verbs (`tessera ps`, `tessera queue`): the API's answers to tables. Pure:
// the answers come from whatever listens at --server, so a field of the wrong type is shown as
// "?", a missing one as "-", and every cell is cut by Cell (printable ASCII, bounded length).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/output.h"

namespace tessera::client {

// How many containers `tessera ps` reads across pages, at most; what follows is left out with a
// note on stderr.
inline constexpr size_t kMaxListedContainers = 100000;

// The query of one page of GET /v1/containers: `states` ("pending,running"; empty: every
// state), `tenancy` (empty: every one the token sees), `after` (the previous page's `next`;
// empty: the first page). Values are percent-encoded.
std::string ContainersQuery(const std::string& states, const std::string& tenancy,
                            const std::string& after);

// ID, TENANCY, IMAGE, STATE, GPUS, AGE, REASON; wide: CREATED, STARTED, FINISHED, EXIT, PORTS,
// QUEUE. `containers`: the list's items (anything else: no rows).
Table ContainersTable(const nlohmann::json& containers, int64_t now_ms);

// GET /v1/queue: POSITION, ID, TENANCY, GPUS, PRIORITY, WAITING, REASON.
Table QueueTable(const nlohmann::json& queue_doc, int64_t now_ms);
// Its tenancies' share lines: TENANCY, WEIGHT, QUOTA-GPUS, GPUS-IN-USE, PENDING, SHARE, TARGET.
Table QueueSharesTable(const nlohmann::json& queue_doc);

// Helpers for row builders of hostile documents.
// `doc[key]` when `doc` is an object that has it; null otherwise.
const nlohmann::json& FieldOf(const nlohmann::json& doc, const char* key);
// A text or number field as a cell: Cell for strings, numbers, booleans and null; "?" for an
// object or an array.
std::string ScalarCell(const nlohmann::json& value);
// An integer field (an integral number within int64, or a finite float cut toward zero);
// `fallback` otherwise.
int64_t IntOf(const nlohmann::json& value, int64_t fallback = 0);
// A time field in Unix ms as FormatTime/FormatAge print it; "?" when it is not a number.
std::string TimeCell(const nlohmann::json& value);
std::string AgeCell(const nlohmann::json& value, int64_t now_ms);

}  // namespace tessera::client
