#include "agent/service/report_service.h"

#include "dtrain/v1/session.pb.h"
#include "agent/health/report_values.h"
#include "agent/service/call_metadata.h"
#include "agent/service/grpc_status.h"
#include "agent/session/wire.h"

namespace dtrain::agent {

grpc::Status ReportService::Report(grpc::ServerContext* context, const v1::WorkerReport* request, v1::ReportAck*) {
  const Status refused = agent_.check_reporter(std::string(call_metadata(*context, kTokenMetadata)),
                                               std::string(call_metadata(*context, kReportTokenMetadata)),
                                               request->rank());
  // Every refused reporter is PERMISSION_DENIED on the wire, an agent still starting included (report_service.h):
  // the reporter treats all failures alike, it logs them and sends the next report.
  if (!refused.ok()) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "report refused: " + refused.message());
  if (Status implausible = check_report_values(*request); !implausible.ok()) {
    return grpc::Status(to_grpc(implausible.code()),
                        "report of rank " + std::to_string(request->rank()) + " refused: " + implausible.message());
  }
  agent_.forward_report(wire::health_of(*request));
  return grpc::Status::OK;
}

}  // namespace dtrain::agent
