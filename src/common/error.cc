#include "common/error.h"

#include <cerrno>
#include <cstring>

namespace tessera {

std::string_view CategoryName(ErrorCategory category) {
  switch (category) {
    case ErrorCategory::kInvalidArgument:
      return "invalid argument";
    case ErrorCategory::kNotFound:
      return "not found";
    case ErrorCategory::kAlreadyExists:
      return "already exists";
    case ErrorCategory::kFailedPrecondition:
      return "failed precondition";
    case ErrorCategory::kPermissionDenied:
      return "permission denied";
    case ErrorCategory::kUnavailable:
      return "unavailable";
    case ErrorCategory::kInternal:
      return "internal";
  }
  return "internal";
}

Error Error::WithContext(std::string_view context) const {
  Error out = *this;
  out.message = std::string(context) + ": " + message;
  return out;
}

Error InvalidArgument(std::string message) {
  return {ErrorCategory::kInvalidArgument, std::move(message)};
}
Error NotFound(std::string message) {
  return {ErrorCategory::kNotFound, std::move(message)};
}
Error AlreadyExists(std::string message) {
  return {ErrorCategory::kAlreadyExists, std::move(message)};
}
Error FailedPrecondition(std::string message) {
  return {ErrorCategory::kFailedPrecondition, std::move(message)};
}
Error PermissionDenied(std::string message) {
  return {ErrorCategory::kPermissionDenied, std::move(message)};
}
Error Unavailable(std::string message) {
  return {ErrorCategory::kUnavailable, std::move(message)};
}
Error Internal(std::string message) {
  return {ErrorCategory::kInternal, std::move(message)};
}

Error ErrnoError(std::string_view what, int errnum) {
  ErrorCategory category = ErrorCategory::kInternal;
  if (errnum == ENOENT || errnum == ENOTDIR) category = ErrorCategory::kNotFound;
  if (errnum == EACCES || errnum == EPERM) category = ErrorCategory::kPermissionDenied;
  if (errnum == EEXIST) category = ErrorCategory::kAlreadyExists;
  return {category, std::string(what) + ": " + std::strerror(errnum)};
}

}  // namespace tessera
