#include "support/cdp_client.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "client/client.h"

extern char** environ;

namespace tessera::testing {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool Exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

}  // namespace

HeadlessChromium::~HeadlessChromium() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

Status HeadlessChromium::Start(const std::string& binary, std::chrono::milliseconds timeout) {
  if (pid_ > 0) return FailedPrecondition("chromium: already started");
  char pattern[] = "/tmp/tessera-chromium-XXXXXX";
  if (!::mkdtemp(pattern)) return ErrnoError("mkdtemp /tmp/tessera-chromium-XXXXXX", errno);
  dir_ = pattern;
  const std::string profile = dir_ + "/profile";
  std::filesystem::create_directories(profile);
  std::vector<std::string> argv = {binary,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--no-first-run",
                                   "--no-default-browser-check",
                                   "--remote-debugging-port=0",
                                   "--user-data-dir=" + profile,
                                   "about:blank"};
  std::vector<char*> args;
  for (auto& arg : argv)
    args.push_back(arg.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = dir_ + "/chromium.log";
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // A process group of its own, so Stop() reaches the zygote, renderers and utilities too.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  int rc = ::posix_spawnp(&pid_, binary.c_str(), &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    pid_ = -1;
    return ErrnoError("spawn " + binary, rc);
  }
  const std::string port_file = profile + "/DevToolsActivePort";
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    // The file is written whole once the DevTools server listens: "PORT\n/devtools/browser/ID".
    std::string text = ReadFile(port_file);
    size_t newline = text.find('\n');
    if (newline != std::string::npos && newline > 0) {
      port_ = static_cast<uint16_t>(std::stoi(text.substr(0, newline)));
      return Ok();
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Unavailable(binary + " exited before writing " + port_file + ":\n" + Log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Unavailable(binary + ": no " + port_file + " after " + std::to_string(timeout.count()) +
                     " ms:\n" + Log());
}

void HeadlessChromium::Stop() {
  if (pid_ <= 0) return;
  // The browser closes its children when it gets SIGTERM; whatever is left goes with SIGKILL.
  ::kill(-pid_, SIGTERM);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  bool reaped = false;
  while (Clock::now() < deadline && !(reaped = Exited(pid_)))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(-pid_, SIGKILL);
  if (!reaped) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

std::string HeadlessChromium::Log() const {
  return dir_.empty() ? std::string() : ReadFile(dir_ + "/chromium.log");
}

Result<std::string> HeadlessChromium::PageWebSocketUrl() {
  if (port_ == 0) return FailedPrecondition("chromium: not started");
  client::Connection devtools(client::Endpoint{"127.0.0.1", port_});
  auto listed = devtools.Call("GET", "/json");
  if (!listed) return listed.error().WithContext("GET /json");
  auto targets = json::parse(listed->body, nullptr, false);
  if (!targets.is_array()) return Internal("GET /json: not a JSON array: " + listed->body);
  for (const auto& target : targets) {
    if (target.value("type", "") == "page" && target.contains("webSocketDebuggerUrl"))
      return WebSocketUrl(target["webSocketDebuggerUrl"]);
  }
  auto created = devtools.Call("PUT", "/json/new?about:blank");
  if (!created) return created.error().WithContext("PUT /json/new");
  auto target = json::parse(created->body, nullptr, false);
  if (!target.is_object() || !target.contains("webSocketDebuggerUrl"))
    return Internal("PUT /json/new: no webSocketDebuggerUrl in " + created->body);
  return WebSocketUrl(target["webSocketDebuggerUrl"]);
}

// Chromium builds the URLs it lists from the request's Host header, which may lack the port:
// keep the target's path and put the address it listens on in front.
std::string HeadlessChromium::WebSocketUrl(const std::string& listed) const {
  size_t path = listed.find("/devtools/");
  return "ws://127.0.0.1:" + std::to_string(port_) +
         (path == std::string::npos ? listed : listed.substr(path));
}

// The WebSocket and the I/O context that drives it. One read is always in flight; what it
// reads lands in `inbox`, so waiting for a message can time out without cancelling anything.
struct CdpSession::Transport {
  net::io_context io;
  websocket::stream<beast::tcp_stream> socket{io};
  beast::flat_buffer buffer;
  std::deque<std::string> inbox;
  std::string error;  // set when the read loop ended

  void ReadNext() {
    socket.async_read(buffer, [this](beast::error_code code, size_t) {
      if (code) {
        error = "read: " + code.message();
        return;
      }
      inbox.push_back(beast::buffers_to_string(buffer.data()));
      buffer.consume(buffer.size());
      ReadNext();
    });
  }

  // Runs handlers until `done` or the deadline; false on the deadline.
  bool RunUntil(const bool& done, Clock::time_point deadline) {
    while (!done) {
      auto now = Clock::now();
      if (now >= deadline) return false;
      io.restart();
      io.run_one_for(deadline - now);
    }
    return true;
  }
};

CdpSession::CdpSession(std::unique_ptr<Transport> transport) : transport_(std::move(transport)) {}

CdpSession::~CdpSession() {
  if (!transport_) return;
  beast::error_code ignored;
  beast::get_lowest_layer(transport_->socket).socket().close(ignored);
}

Result<std::unique_ptr<CdpSession>> CdpSession::Connect(const std::string& ws_url,
                                                        std::chrono::milliseconds timeout) {
  // ws://HOST:PORT/PATH
  const std::string scheme = "ws://";
  if (ws_url.rfind(scheme, 0) != 0) return InvalidArgument("CDP URL: not ws://: " + ws_url);
  size_t slash = ws_url.find('/', scheme.size());
  if (slash == std::string::npos) return InvalidArgument("CDP URL: no path: " + ws_url);
  std::string host_port = ws_url.substr(scheme.size(), slash - scheme.size());
  std::string path = ws_url.substr(slash);
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("CDP URL: no port: " + ws_url);
  beast::error_code code;
  auto address = net::ip::make_address(host_port.substr(0, colon), code);
  if (code) return InvalidArgument("CDP URL: host is not an IP address: " + ws_url);
  tcp::endpoint endpoint(address, static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));

  auto transport = std::make_unique<Transport>();
  auto deadline = Clock::now() + timeout;
  bool done = false;
  auto& stream = beast::get_lowest_layer(transport->socket);
  stream.expires_after(timeout);
  stream.async_connect(endpoint, [&](beast::error_code error) {
    code = error;
    done = true;
  });
  if (!transport->RunUntil(done, deadline) || code)
    return Unavailable("connect " + host_port + ": " + (code ? code.message() : "timed out"));
  done = false;
  transport->socket.async_handshake(host_port, path, [&](beast::error_code error) {
    code = error;
    done = true;
  });
  if (!transport->RunUntil(done, deadline) || code)
    return Unavailable("WebSocket handshake " + ws_url + ": " +
                       (code ? code.message() : "timed out"));
  // From here the WebSocket layer's own timeouts apply, not the TCP deadline.
  stream.expires_never();
  transport->socket.set_option(
      websocket::stream_base::timeout::suggested(beast::role_type::client));
  transport->socket.read_message_max(64 << 20);
  transport->ReadNext();
  return std::unique_ptr<CdpSession>(new CdpSession(std::move(transport)));
}

bool CdpSession::ReadMessage(Clock::time_point deadline, json* message, std::string* error) {
  Transport& t = *transport_;
  while (t.inbox.empty()) {
    if (!t.error.empty()) {
      *error = t.error;
      return false;
    }
    auto now = Clock::now();
    if (now >= deadline) {
      *error = "timed out";
      return false;
    }
    t.io.restart();
    t.io.run_one_for(deadline - now);
  }
  std::string text = std::move(t.inbox.front());
  t.inbox.pop_front();
  *message = json::parse(text, nullptr, false);
  if (message->is_discarded()) {
    *error = "not JSON: " + text.substr(0, 200);
    return false;
  }
  return true;
}

Result<json> CdpSession::Call(const std::string& method, const json& params,
                              std::chrono::milliseconds timeout) {
  if (!broken_.empty()) return Unavailable("CDP " + method + ": session broken: " + broken_);
  const int64_t id = next_id_++;
  const std::string text = json{{"id", id}, {"method", method}, {"params", params}}.dump();
  auto deadline = Clock::now() + timeout;
  bool written = false;
  beast::error_code code;
  transport_->socket.text(true);
  transport_->socket.async_write(net::buffer(text), [&](beast::error_code error, size_t) {
    code = error;
    written = true;
  });
  if (!transport_->RunUntil(written, deadline) || code) {
    broken_ = "write: " + (code ? code.message() : std::string("timed out"));
    return Unavailable("CDP " + method + ": " + broken_);
  }
  while (true) {
    json message;
    std::string error;
    if (!ReadMessage(deadline, &message, &error)) {
      // A late answer would be taken for the next call's: the session cannot go on.
      broken_ = error;
      return Unavailable("CDP " + method + ": " + error);
    }
    if (!message.contains("id")) {
      events_.push_back(std::move(message));
      continue;
    }
    if (message["id"] != id) continue;
    if (message.contains("error")) {
      return Internal("CDP " + method + ": " + message["error"].value("message", "") + " (" +
                      message["error"].dump() + ")");
    }
    return message.value("result", json::object());
  }
}

Result<json> CdpSession::Evaluate(const std::string& expression,
                                  std::chrono::milliseconds timeout) {
  auto answer =
      Call("Runtime.evaluate",
           {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}}, timeout);
  if (!answer) return answer.error();
  if (answer->contains("exceptionDetails")) {
    const json& details = (*answer)["exceptionDetails"];
    std::string text = details.value("text", "exception");
    if (details.contains("exception")) text += ": " + details["exception"].value("description", "");
    return Internal("evaluate " + expression.substr(0, 80) + ": " + text);
  }
  return (*answer)["result"].value("value", json());
}

void CdpSession::Pump(std::chrono::milliseconds duration) {
  if (!broken_.empty()) return;
  auto deadline = Clock::now() + duration;
  json message;
  std::string error;
  while (ReadMessage(deadline, &message, &error)) {
    if (!message.contains("id")) events_.push_back(std::move(message));
  }
  if (error != "timed out") broken_ = error;
}

std::vector<json> CdpSession::Events(const std::string& method) const {
  std::vector<json> out;
  for (const auto& event : events_) {
    if (event.value("method", "") == method) out.push_back(event);
  }
  return out;
}

namespace {

// RFC 4648 base64, as CDP sends binary data.
std::string DecodeBase64(const std::string& text) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const auto value = kAlphabet.find(c);
    if (value == std::string::npos) continue;
    buffer = (buffer << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace

Status SaveScreenshot(CdpSession& page, const std::string& path, int width, int height) {
  auto sized = page.Call(
      "Emulation.setDeviceMetricsOverride",
      {{"width", width}, {"height", height}, {"deviceScaleFactor", 1}, {"mobile", false}});
  if (!sized) return sized.error();
  auto shot = page.Call("Page.captureScreenshot", {{"format", "png"}});
  if (!shot) return shot.error();
  const std::string png = DecodeBase64(shot->value("data", ""));
  if (png.size() < 8 || png.compare(1, 3, "PNG") != 0)
    return Internal("Page.captureScreenshot: not a PNG");
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << png;
  if (!out) return Internal("write " + path);
  return Ok();
}

}  // namespace tessera::testing
