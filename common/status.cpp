#include "common/status.h"

namespace dtrain {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::not_found: return "not_found";
    case StatusCode::already_exists: return "already_exists";
    case StatusCode::permission_denied: return "permission_denied";
    case StatusCode::unauthenticated: return "unauthenticated";
    case StatusCode::deadline_exceeded: return "deadline_exceeded";
    case StatusCode::aborted: return "aborted";
    case StatusCode::failed_precondition: return "failed_precondition";
    case StatusCode::cancelled: return "cancelled";
    case StatusCode::unavailable: return "unavailable";
    case StatusCode::resource_exhausted: return "resource_exhausted";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

}  // namespace dtrain
