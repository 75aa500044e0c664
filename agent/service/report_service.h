#pragma once

#include "dtrain/v1/report.grpc.pb.h"

namespace dtrain::agent {

class Agent;

// WorkerReports.Report: a worker's health report (step, loss, throughput, memory), forwarded to the launcher.
// The `dtrain-token` metadata must be the current round's store token.
class ReportService final : public v1::WorkerReports::Service {
 public:
  explicit ReportService(Agent& agent) : agent_(agent) {}

  grpc::Status Report(grpc::ServerContext* context, const v1::WorkerReport* request, v1::ReportAck* reply) override;

 private:
  Agent& agent_;
};

}  // namespace dtrain::agent
