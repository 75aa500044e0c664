#pragma once
// The one conversion from dtrain's Status to gRPC's: each code becomes the same-named grpc::StatusCode
// (common/status.h), so a failure crosses the wire without losing its kind.

#include <grpcpp/grpcpp.h>

#include "common/status.h"

namespace dtrain::agent {

grpc::StatusCode to_grpc(StatusCode code);
// OK for success, else the same-named code with the status's message.
grpc::Status to_grpc(const Status& status);

}  // namespace dtrain::agent
