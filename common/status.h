#pragma once

// How dtrain reports failure: one convention, everywhere.
//
//   Exceptions   at process boundaries (a command that cannot run: a broken spec, a missing secret, a port in use;
//                main() turns them into a message and an exit code) and for programming errors (a broken
//                invariant). Never for something the caller is expected to handle.
//   Status       an expected failure that the caller handles: a worker that cannot be spawned, a store key that is
//                missing in time, a session that was refused. `Status{}` is success; a failure has a code and a
//                message that says what went wrong, where, and what to do, as a user will read it.
//   Result<T>    a value or the Status that says why there is none.
//
// Not used: strings where "" means success, std::variant<T, std::string>, bool plus an out-parameter for the
// reason. Codes are gRPC's canonical ones (a service maps each to the same-named grpc::StatusCode), so a failure
// crosses the wire without losing its kind.

#include <string>
#include <utility>

namespace dtrain {

enum class StatusCode {
  ok,
  invalid_argument,     // the caller's input breaks a rule or a limit (the message names it)
  not_found,            // a named thing (file, program, user, session) does not exist
  already_exists,       // a thing that must be new is there already
  permission_denied,    // the caller is known but may not do this
  unauthenticated,      // the caller is not known (no or a wrong token or certificate)
  deadline_exceeded,    // a wait ran out of time
  aborted,              // the operation's context ended under it (a round, a namespace, a session)
  failed_precondition,  // the state does not allow it now (a value that is not an integer, a job already running)
  cancelled,            // the caller cancelled it
  unavailable,          // the peer or service is gone or shutting down; trying again elsewhere or later may work
  resource_exhausted,   // a quota or a disk is full; freeing room makes it work again
  internal,             // a system call failed in a way the caller cannot fix (the message carries errno's text)
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

// A value or the reason there is none (`value` is meaningful only when status.ok()).
//   Result<int> r = parse(...);          return {status};          return {{}, 42};
template <class T>
struct Result {
  Status status;
  T value{};

  bool ok() const { return status.ok(); }
};

// "invalid_argument" for StatusCode::invalid_argument.
const char* status_code_name(StatusCode code);

}  // namespace dtrain
