#include "worker/report/report_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "common/grpc/metadata.h"
#include "common/report/report_fields.h"
#include "dtrain/v1/report.grpc.pb.h"
#include "worker/credentials.h"

namespace dtrain::worker {

struct ReportClient::Impl {
  ReportClientOptions options;
  std::unique_ptr<v1::WorkerReports::Stub> stub;
};

Result<std::unique_ptr<ReportClient>> ReportClient::open(ReportClientOptions options) {
  grpc::ChannelArguments arguments;
  const auto credentials = credentials_from_env(arguments);
  if (!credentials.ok()) return {credentials.status};
  auto impl = std::make_unique<Impl>();
  impl->stub =
      v1::WorkerReports::NewStub(grpc::CreateCustomChannel(options.address, credentials.value, arguments));
  impl->options = std::move(options);
  return {{}, std::unique_ptr<ReportClient>(new ReportClient(std::move(impl)))};
}

ReportClient::ReportClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ReportClient::~ReportClient() = default;

Status ReportClient::send(const HealthReport& report, const ReportContext& context) const {
  HealthValues values = report;
  values.steps_done = context.steps_done;
  values.phase = context.phase;
  values.dump_signal = context.dump_signal;
  values.exiting = context.exiting;
  v1::WorkerReport request;
  to_report(values, request);
  v1::ReportAck ack;
  grpc::ClientContext call;
  call.AddMetadata(std::string(kTokenMetadata), impl_->options.token);
  call.AddMetadata(std::string(kReportTokenMetadata), impl_->options.report_token);
  call.set_deadline(std::chrono::system_clock::now() + impl_->options.deadline);
  const grpc::Status status = impl_->stub->Report(&call, request, &ack);
  if (status.ok()) return {};
  return {StatusCode::unavailable, status.error_message()};
}

}  // namespace dtrain::worker
