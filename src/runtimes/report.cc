// Doctor output: a table for people, JSON for tools.
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "PASS";
    case Verdict::kWarn:
      return "WARN";
    case Verdict::kFail:
      return "FAIL";
  }
  return "?";
}

bool DoctorReport::HasFailure() const {
  for (const auto& check : checks) {
    if (check.verdict == Verdict::kFail) return true;
  }
  return false;
}

std::string ToTable(const DoctorReport& report) {
  size_t id_width = 5;
  for (const auto& check : report.checks)
    id_width = std::max(id_width, check.id.size());
  std::ostringstream out;
  int counts[3] = {0, 0, 0};
  for (const auto& check : report.checks) {
    ++counts[int(check.verdict)];
    out << VerdictName(check.verdict) << "  " << check.id
        << std::string(id_width - check.id.size() + 2, ' ') << check.title << "\n";
    out << "      " << std::string(id_width + 2, ' ') << "seen: " << check.evidence << "\n";
    if (!check.fix.empty())
      out << "      " << std::string(id_width + 2, ' ') << "fix:  " << check.fix << "\n";
  }
  out << counts[0] << " passed, " << counts[1] << " warnings, " << counts[2] << " failed\n";
  return out.str();
}

std::string ToJson(const DoctorReport& report) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& check : report.checks) {
    checks.push_back({{"id", check.id},
                      {"title", check.title},
                      {"verdict", VerdictName(check.verdict)},
                      {"evidence", check.evidence},
                      {"fix", check.fix}});
  }
  nlohmann::json doc = {{"checks", checks}, {"failed", report.HasFailure()}};
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tessera::runtimes
