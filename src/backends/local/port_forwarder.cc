// Published ports of the local backend (see port_forwarder.h).
#include "backends/local/port_forwarder.h"

#include <fcntl.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "common/asio_cloexec.h"

namespace tessera::backends {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr size_t kChunk = 16 * 1024;

// A socket of `family` in the network namespace of `pid`, made on a thread of its own (setns
// changes the calling thread's namespace: none of the service's threads ever leaves its own).
Result<int> SocketInNamespaceOf(int pid, int family) {
  Result<int> result = Internal("socket in the network namespace of " + std::to_string(pid));
  std::thread([&result, pid, family] {
    const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
    const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) {
      result = ErrnoError("open " + path, errno);
      return;
    }
    if (::setns(ns, CLONE_NEWNET) != 0) {
      result = ErrnoError("setns " + path, errno);
      ::close(ns);
      return;
    }
    ::close(ns);
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      result = ErrnoError("socket", errno);
      return;
    }
    result = fd;
  }).join();
  return result;
}

}  // namespace

// One forwarded connection: bytes both ways until both sides are done. (Outside the anonymous
// namespace: PortForwarder::State holds them.)
struct ForwardedSession : std::enable_shared_from_this<ForwardedSession> {
  ForwardedSession(tcp::socket client, tcp::socket upstream)
      : client(std::move(client)), upstream(std::move(upstream)) {}

  void Pump(tcp::socket& from, tcp::socket& to, std::array<char, kChunk>& buffer) {
    from.async_read_some(asio::buffer(buffer), [self = shared_from_this(), &from, &to, &buffer](
                                                   boost::system::error_code error, size_t n) {
      if (error) {
        boost::system::error_code ignored;
        to.shutdown(tcp::socket::shutdown_send, ignored);
        return;
      }
      asio::async_write(to, asio::buffer(buffer.data(), n),
                        [self, &from, &to, &buffer](boost::system::error_code error, size_t) {
                          if (error) {
                            boost::system::error_code ignored;
                            from.close(ignored);
                            to.close(ignored);
                            return;
                          }
                          self->Pump(from, to, buffer);
                        });
    });
  }
  void Close() {
    boost::system::error_code ignored;
    client.close(ignored);
    upstream.close(ignored);
  }

  tcp::socket client;
  tcp::socket upstream;
  std::array<char, kChunk> to_container{};
  std::array<char, kChunk> to_client{};
};

struct PortForwarder::State : std::enable_shared_from_this<PortForwarder::State> {
  struct Listener {
    std::string id;
    int container_port = 0;
    std::unique_ptr<tcp::acceptor> acceptor;
  };

  explicit State(Resolve resolve) : resolve(std::move(resolve)), work(io.get_executor()) {}

  // Closes `id`'s listeners and connections (every one when `id` is empty), on the I/O threads.
  void CloseOf(const std::string& id) {
    std::vector<std::shared_ptr<Listener>> closing;
    std::vector<std::shared_ptr<ForwardedSession>> open;
    {
      std::lock_guard lock(mu);
      for (auto it = listeners.begin(); it != listeners.end();) {
        if (!id.empty() && it->first != id) {
          ++it;
          continue;
        }
        closing.push_back(it->second);
        it = listeners.erase(it);
      }
      for (auto it = sessions.begin(); it != sessions.end();) {
        if (!id.empty() && it->first != id) {
          ++it;
          continue;
        }
        if (auto session = it->second.lock()) open.push_back(std::move(session));
        it = sessions.erase(it);
      }
      if (id.empty())
        targets.clear();
      else
        targets.erase(id);
    }
    // Closed on an I/O thread (an acceptor is not safe to close beside its pending accept), and
    // waited for: once this returns the ports are free for the next container.
    std::promise<void> closed;
    asio::post(io, [&closed, &closing, &open] {
      for (const auto& listener : closing) {
        boost::system::error_code ignored;
        listener->acceptor->close(ignored);
      }
      for (const auto& session : open)
        session->Close();
      closed.set_value();
    });
    closed.get_future().wait();
  }

  void Accept(const std::shared_ptr<Listener>& listener) {
    AsyncAcceptCloseOnExec(
        *listener->acceptor, io.get_executor(),
        [self = shared_from_this(), listener](boost::system::error_code error, tcp::socket client) {
          if (error == asio::error::operation_aborted || !listener->acceptor->is_open()) return;
          if (!error) self->Connect(listener, std::move(client));
          self->Accept(listener);
        });
  }

  // Where the container is now: known, or asked (off the I/O threads' hot path only once).
  Result<ForwardTarget> TargetOf(const std::string& id) {
    {
      std::lock_guard lock(mu);
      if (auto known = targets.find(id); known != targets.end()) return known->second;
    }
    auto target = resolve(id);
    if (!target) return target;
    std::lock_guard lock(mu);
    if (listeners.count(id)) targets[id] = *target;
    return target;
  }

  void Connect(const std::shared_ptr<Listener>& listener, tcp::socket client) {
    auto target = TargetOf(listener->id);
    boost::system::error_code error;
    const auto address =
        target ? asio::ip::make_address(target->address, error) : asio::ip::address();
    if (!target || error) return;  // not running (yet): the connection is closed
    auto fd = SocketInNamespaceOf(target->pid, address.is_v6() ? AF_INET6 : AF_INET);
    if (!fd) {
      std::lock_guard lock(mu);
      targets.erase(listener->id);  // the process is gone: ask again next time
      return;
    }
    tcp::socket upstream(io);
    upstream.assign(address.is_v6() ? tcp::v6() : tcp::v4(), *fd, error);
    if (error) {
      ::close(*fd);
      return;
    }
    auto session = std::make_shared<ForwardedSession>(std::move(client), std::move(upstream));
    {
      std::lock_guard lock(mu);
      // Ended connections leave with each new one: the list stays as long as the open ones.
      auto [first, last] = sessions.equal_range(listener->id);
      for (auto it = first; it != last;)
        it = it->second.expired() ? sessions.erase(it) : std::next(it);
      sessions.emplace(listener->id, session);
    }
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(listener->container_port));
    session->upstream.async_connect(endpoint, [session](boost::system::error_code error) {
      if (error) return session->Close();
      session->Pump(session->client, session->upstream, session->to_container);
      session->Pump(session->upstream, session->client, session->to_client);
    });
  }

  Resolve resolve;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<std::thread> threads;
  mutable std::mutex mu;  // guards the maps below
  std::multimap<std::string, std::shared_ptr<Listener>> listeners;
  std::map<std::string, ForwardTarget> targets;
  std::multimap<std::string, std::weak_ptr<ForwardedSession>> sessions;
};

PortForwarder::PortForwarder(Resolve resolve)
    : state_(std::make_shared<State>(std::move(resolve))) {
  // Two threads: a connection that asks where its container is (podman inspect) holds one.
  for (int i = 0; i < 2; ++i)
    state_->threads.emplace_back([state = state_.get()] { state->io.run(); });
}

PortForwarder::~PortForwarder() {
  // Everything closed, then the threads run out of work: no handler is left holding the state.
  state_->CloseOf("");
  state_->work.reset();
  for (auto& thread : state_->threads)
    thread.join();
}

Status PortForwarder::Add(const std::string& id, const std::vector<fleet::PublishedPort>& ports) {
  Remove(id);
  std::vector<std::shared_ptr<State::Listener>> made;
  for (const auto& port : ports) {
    if (port.protocol != "tcp" || port.host_port <= 0) continue;
    boost::system::error_code error;
    const auto address = asio::ip::make_address(port.host_address, error);
    if (error)
      return InvalidArgument("publish address \"" + port.host_address + "\": " + error.message());
    auto listener = std::make_shared<State::Listener>();
    listener->id = id;
    listener->container_port = port.container_port;
    listener->acceptor = std::make_unique<tcp::acceptor>(state_->io);
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(port.host_port));
    error = OpenCloseOnExec(*listener->acceptor, endpoint.protocol());
    if (!error) listener->acceptor->set_option(tcp::acceptor::reuse_address(true), error);
    if (!error) listener->acceptor->bind(endpoint, error);
    if (!error) listener->acceptor->listen(asio::socket_base::max_listen_connections, error);
    if (!error) listener->acceptor->non_blocking(true, error);  // AsyncAcceptCloseOnExec's accept4
    if (error)
      return Unavailable("publish " + port.host_address + ":" + std::to_string(port.host_port) +
                         ": " + error.message());
    made.push_back(std::move(listener));
  }
  std::lock_guard lock(state_->mu);
  for (auto& listener : made) {
    state_->listeners.emplace(id, listener);
    state_->Accept(listener);
  }
  return Ok();
}

void PortForwarder::Remove(const std::string& id) {
  if (!id.empty()) state_->CloseOf(id);
}

size_t PortForwarder::size() const {
  std::lock_guard lock(state_->mu);
  size_t count = 0;
  for (auto it = state_->listeners.begin(); it != state_->listeners.end();
       it = state_->listeners.upper_bound(it->first))
    ++count;
  return count;
}

std::string PortsToLabel(const std::vector<fleet::PublishedPort>& ports) {
  std::string label;
  for (const auto& port : ports) {
    if (port.host_port <= 0) continue;
    if (!label.empty()) label += ",";
    label += port.host_address + ":" + std::to_string(port.host_port) + ":" +
             std::to_string(port.container_port) + "/" + port.protocol;
  }
  return label;
}

std::vector<fleet::PublishedPort> PortsFromLabel(const std::string& label) {
  std::vector<fleet::PublishedPort> ports;
  size_t at = 0;
  while (at < label.size()) {
    const size_t end = std::min(label.find(',', at), label.size());
    const std::string entry = label.substr(at, end - at);
    at = end + 1;
    // From the right: an IPv6 address has colons of its own.
    const size_t slash = entry.rfind('/');
    const size_t second = entry.rfind(':', slash);
    if (slash == std::string::npos || second == std::string::npos || second == 0) continue;
    const size_t first = entry.rfind(':', second - 1);
    if (first == std::string::npos) continue;
    fleet::PublishedPort port;
    port.host_address = entry.substr(0, first);
    port.protocol = entry.substr(slash + 1);
    try {
      port.host_port = std::stoi(entry.substr(first + 1, second - first - 1));
      port.container_port = std::stoi(entry.substr(second + 1, slash - second - 1));
    } catch (const std::exception&) {
      continue;
    }
    ports.push_back(std::move(port));
  }
  return ports;
}

}  // namespace tessera::backends
