// Errors as values: one Error type with a category, and Result<T> carrying a value or an Error.
// Categories follow containerd's errdefs; only the edges (cli, api, deviceplugin) map them to
// exit codes or protocol status codes.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera {

enum class ErrorCategory {
  kInvalidArgument,     // the caller's input is malformed
  kNotFound,            // the named thing does not exist
  kAlreadyExists,       // creating something that is already there
  kFailedPrecondition,  // valid request, but the system is not in a state to do it
  kPermissionDenied,    // the caller may not do this
  kUnavailable,         // a dependency (socket, daemon, library) cannot be reached right now
  kInternal,            // an invariant broke or an OS call failed unexpectedly
};

std::string_view CategoryName(ErrorCategory category);

struct Error {
  ErrorCategory category = ErrorCategory::kInternal;
  std::string message;  // names the input, path or field and the problem

  // Prefixes context ("open /sys/...: " + message), crun-style.
  Error WithContext(std::string_view context) const;
};

Error InvalidArgument(std::string message);
Error NotFound(std::string message);
Error AlreadyExists(std::string message);
Error FailedPrecondition(std::string message);
Error PermissionDenied(std::string message);
Error Unavailable(std::string message);
Error Internal(std::string message);
// Builds an Error from errno after a failed system call: "<what>: <strerror>".
Error ErrnoError(std::string_view what, int errnum);

// A value or an Error. Small on purpose: std::expected is not usable with clang-14 (the fuzzing
// compiler) against GCC 12's libstdc++, so the project uses this everywhere instead.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(state_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(state_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(state_));
  }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(state_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

inline Status Ok() {
  return Status();
}

}  // namespace tessera
