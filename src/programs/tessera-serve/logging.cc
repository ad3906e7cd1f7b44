// tessera-serve's log: one JSON object per line on stderr.
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "wiring.h"

namespace tessera::serve_program {
namespace {

// spdlog flag %j: the message as a JSON string body, so every line is one JSON object.
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string text(msg.payload.data(), msg.payload.size());
    std::string escaped =
        nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(escaped.data() + 1, escaped.data() + escaped.size() - 1);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessage>();
  }
};

}  // namespace

void SetUpLogging(const std::string& level) {
  auto logger = std::make_shared<spdlog::logger>("tessera",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonMessage>('j').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","component":"serve","msg":"%j"})");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void Die(const Error& error) {
  spdlog::critical("{}", error.message);
  std::fprintf(stderr, "tessera serve: %s\n", error.message.c_str());
  std::exit(error.category == ErrorCategory::kInvalidArgument ? 2 : 5);
}

}  // namespace tessera::serve_program
