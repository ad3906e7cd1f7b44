// `tessera top`'s frame, drawn from the JSON of /v1/telemetry (telemetry::PassToJson's shape).
// Pure, so it is tested with hostile documents: a figure outside its range is shown at the
// range's end, a non-number as missing, and text as printable ASCII.
#pragma once

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::client {

// One frame: a line per GPU (and per MIG instance), then one per tenancy and the unattributed.
// `source` names the server in the title; `now` is the title's time.
std::string RenderTop(const nlohmann::json& doc, const std::string& source, std::time_t now);

}  // namespace tessera::client
