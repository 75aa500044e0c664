#pragma once

#include "agent/service/agent_ports.h"
#include "dtrain/v1/report.grpc.pb.h"

namespace dtrain::agent {

// WorkerReports.Report: a worker's health report (step, loss, throughput, memory, where its step time goes, its
// phase), forwarded to the launcher inside WorkerHealth.
// Refused with PERMISSION_DENIED unless the `dtrain-token` metadata is the current round's job token and
// `dtrain-report-token` is the reporting rank's own DTRAIN_REPORT_TOKEN (JobRunner::check_reporter); refused with
// INVALID_ARGUMENT when check_report_values (health/report_values.h) finds a value that cannot be real.
class ReportService final : public v1::WorkerReports::Service {
 public:
  explicit ReportService(ReportSink& agent) : agent_(agent) {}

  grpc::Status Report(grpc::ServerContext* context, const v1::WorkerReport* request, v1::ReportAck* reply) override;

 private:
  ReportSink& agent_;
};

}  // namespace dtrain::agent
