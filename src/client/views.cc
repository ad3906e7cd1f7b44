// The rows of `tessera ps` and `tessera queue` (views.h).
#include "client/views.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "client/client.h"

namespace tessera::client {
namespace {

using nlohmann::json;

// At most this many published ports are named in one PORTS cell; "+N" counts the others.
constexpr size_t kMaxPortsInCell = 4;

}  // namespace

namespace {

// "1g.10gbx2" for MIG slices, the fraction for a share of a GPU, else the GPUs asked for.
std::string GpusCell(const json& container) {
  const json& mig = FieldOf(container, "mig");
  if (mig.is_object())
    return ScalarCell(FieldOf(mig, "profile")) + "x" + ScalarCell(FieldOf(mig, "count"));
  if (FieldOf(container, "share").is_object()) return ScalarCell(FieldOf(container, "share_gpus"));
  return ScalarCell(FieldOf(container, "gpus_requested"));
}

// One published port as docker prints it: "127.0.0.1:40001->8080/tcp", "8080/tcp" until its
// address is known.
std::string PortText(const json& port) {
  std::string text = ScalarCell(FieldOf(port, "container_port"));
  const json& protocol = FieldOf(port, "protocol");
  text += "/" + (protocol.is_string() ? ScalarCell(protocol) : std::string("tcp"));
  const json& address = FieldOf(port, "address");
  if (address.is_string() && !address.get_ref<const std::string&>().empty())
    text = ScalarCell(address) + "->" + text;
  return text;
}

std::string PortsCell(const json& container) {
  const json& ports = FieldOf(container, "ports");
  if (ports.is_null()) return "-";
  if (!ports.is_array()) return "?";
  if (ports.empty()) return "-";
  std::string text;
  for (size_t i = 0; i < ports.size() && i < kMaxPortsInCell; ++i)
    text += (i ? "," : "") + PortText(ports[i]);
  if (ports.size() > kMaxPortsInCell) text += ",+" + std::to_string(ports.size() - kMaxPortsInCell);
  return Cell(json(text));
}

}  // namespace

const json& FieldOf(const json& doc, const char* key) {
  static const json kNull;
  if (!doc.is_object()) return kNull;
  auto it = doc.find(key);
  return it == doc.end() ? kNull : *it;
}

std::string ScalarCell(const json& value) {
  if (value.is_object() || value.is_array() || value.is_binary()) return "?";
  return Cell(value);
}

int64_t IntOf(const json& value, int64_t fallback) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    return n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? fallback
                                                                          : static_cast<int64_t>(n);
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return static_cast<int64_t>(d);
  }
  return fallback;
}

std::string TimeCell(const json& value) {
  if (value.is_null()) return "-";
  if (!value.is_number()) return "?";
  return FormatTime(IntOf(value, 0));
}

std::string AgeCell(const json& value, int64_t now_ms) {
  if (value.is_null()) return "-";
  if (!value.is_number()) return "?";
  return FormatAge(IntOf(value, 0), now_ms);
}

std::string ContainersQuery(const std::string& states, const std::string& tenancy,
                            const std::string& after) {
  std::string query = "/v1/containers?limit=500";
  if (!states.empty()) {
    // Each state escaped; the commas between them stay the list's.
    query += "&state=";
    size_t start = 0;
    for (size_t comma; (comma = states.find(',', start)) != std::string::npos; start = comma + 1)
      query += QueryEscape(std::string_view(states).substr(start, comma - start)) + ",";
    query += QueryEscape(std::string_view(states).substr(start));
  }
  if (!tenancy.empty()) query += "&tenancy=" + QueryEscape(tenancy);
  if (!after.empty()) query += "&after=" + QueryEscape(after);
  return query;
}

Table ContainersTable(const json& containers, int64_t now_ms) {
  Table table;
  for (const char* header : {"ID", "TENANCY", "IMAGE", "STATE", "GPUS", "AGE", "REASON"})
    table.columns.push_back({header, false});
  for (const char* header : {"CREATED", "STARTED", "FINISHED", "EXIT", "PORTS", "QUEUE"})
    table.columns.push_back({header, true});
  if (!containers.is_array()) return table;
  for (const json& c : containers) {
    table.rows.push_back({ScalarCell(FieldOf(c, "id")), ScalarCell(FieldOf(c, "tenancy")),
                          ScalarCell(FieldOf(c, "image")), ScalarCell(FieldOf(c, "state")),
                          GpusCell(c), AgeCell(FieldOf(c, "created_ms"), now_ms),
                          ScalarCell(FieldOf(c, "reason")), TimeCell(FieldOf(c, "created_ms")),
                          TimeCell(FieldOf(c, "started_ms")), TimeCell(FieldOf(c, "finished_ms")),
                          ScalarCell(FieldOf(c, "exit_code")), PortsCell(c),
                          ScalarCell(FieldOf(c, "queue_position"))});
  }
  return table;
}

Table QueueTable(const json& queue_doc, int64_t now_ms) {
  Table table;
  for (const char* header : {"POSITION", "ID", "TENANCY", "GPUS", "PRIORITY", "WAITING", "REASON"})
    table.columns.push_back({header, false});
  const json& queue = FieldOf(queue_doc, "queue");
  if (!queue.is_array()) return table;
  for (const json& entry : queue) {
    table.rows.push_back(
        {ScalarCell(FieldOf(entry, "queue_position")), ScalarCell(FieldOf(entry, "id")),
         ScalarCell(FieldOf(entry, "tenancy")), ScalarCell(FieldOf(entry, "gpus")),
         ScalarCell(FieldOf(entry, "priority")), AgeCell(FieldOf(entry, "created_ms"), now_ms),
         ScalarCell(FieldOf(entry, "reason"))});
  }
  return table;
}

Table QueueSharesTable(const json& queue_doc) {
  Table table;
  for (const char* header :
       {"TENANCY", "WEIGHT", "QUOTA-GPUS", "GPUS-IN-USE", "PENDING", "SHARE", "TARGET"})
    table.columns.push_back({header, false});
  const json& tenancies = FieldOf(queue_doc, "tenancies");
  if (!tenancies.is_array()) return table;
  auto fraction = [](const json& value) {
    if (!value.is_number()) return ScalarCell(value);
    const double d = value.get<double>();
    if (!std::isfinite(d)) return std::string("?");
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", d);
    return std::string(text);
  };
  for (const json& t : tenancies) {
    // A quota of null is unlimited; a missing one is not known.
    const json& quota = FieldOf(t, "quota");
    const bool unlimited = quota.is_object() && quota.contains("gpus") && quota["gpus"].is_null();
    table.rows.push_back({ScalarCell(FieldOf(t, "name")), ScalarCell(FieldOf(t, "weight")),
                          unlimited ? "unlimited" : ScalarCell(FieldOf(quota, "gpus")),
                          ScalarCell(FieldOf(t, "gpus_in_use")), ScalarCell(FieldOf(t, "pending")),
                          fraction(FieldOf(t, "share")), fraction(FieldOf(t, "target_share"))});
  }
  return table;
}

}  // namespace tessera::client
