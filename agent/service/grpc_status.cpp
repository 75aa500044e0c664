#include "agent/service/grpc_status.h"

namespace dtrain::agent {

grpc::StatusCode to_grpc(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return grpc::StatusCode::OK;
    case StatusCode::invalid_argument: return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::unauthenticated: return grpc::StatusCode::UNAUTHENTICATED;
    case StatusCode::deadline_exceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::aborted: return grpc::StatusCode::ABORTED;
    case StatusCode::failed_precondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::cancelled: return grpc::StatusCode::CANCELLED;
    case StatusCode::unavailable: return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::resource_exhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::not_found: return grpc::StatusCode::NOT_FOUND;
    case StatusCode::already_exists: return grpc::StatusCode::ALREADY_EXISTS;
    case StatusCode::permission_denied: return grpc::StatusCode::PERMISSION_DENIED;
    case StatusCode::internal: return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status to_grpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return {to_grpc(status.code()), status.message()};
}

}  // namespace dtrain::agent
