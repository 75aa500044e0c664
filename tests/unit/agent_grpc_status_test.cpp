// The services' one Status conversion: every dtrain code crosses the wire as the same-named gRPC code, with its
// message, so a caller can tell a missing key from a closed namespace or a refused caller.
#include <doctest/doctest.h>

#include <utility>

#include "agent/service/grpc_status.h"

using dtrain::Status;
using dtrain::StatusCode;
using dtrain::agent::to_grpc;

TEST_CASE("every status code becomes the same-named gRPC code") {
  const std::pair<StatusCode, grpc::StatusCode> same_named[] = {
      {StatusCode::ok, grpc::StatusCode::OK},
      {StatusCode::invalid_argument, grpc::StatusCode::INVALID_ARGUMENT},
      {StatusCode::not_found, grpc::StatusCode::NOT_FOUND},
      {StatusCode::already_exists, grpc::StatusCode::ALREADY_EXISTS},
      {StatusCode::permission_denied, grpc::StatusCode::PERMISSION_DENIED},
      {StatusCode::unauthenticated, grpc::StatusCode::UNAUTHENTICATED},
      {StatusCode::deadline_exceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {StatusCode::aborted, grpc::StatusCode::ABORTED},
      {StatusCode::failed_precondition, grpc::StatusCode::FAILED_PRECONDITION},
      {StatusCode::cancelled, grpc::StatusCode::CANCELLED},
      {StatusCode::unavailable, grpc::StatusCode::UNAVAILABLE},
      {StatusCode::resource_exhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {StatusCode::internal, grpc::StatusCode::INTERNAL},
  };
  for (const auto& [code, expected] : same_named) {
    CAPTURE(dtrain::status_code_name(code));
    CHECK(to_grpc(code) == expected);
  }
}

TEST_CASE("a failure keeps its message on the wire; success is plain OK") {
  const grpc::Status failed = to_grpc(Status{StatusCode::not_found, "key 'x' is not in the store"});
  CHECK(failed.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(failed.error_message() == "key 'x' is not in the store");
  const grpc::Status ok = to_grpc(Status{});
  CHECK(ok.ok());
  CHECK(ok.error_message().empty());
}
