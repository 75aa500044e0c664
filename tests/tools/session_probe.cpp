// dtrain-session-probe: a raw session client for the security tests. It opens AgentService.Session on ADDRESS the
// way a launcher would, and, if the agent says hello, tries to make it run a command and use the paths it is
// given. It prints one line per outcome, for the test to read:
//   refused: <gRPC code> <message>     the agent gave no session (exit 3)
//   hello                              the agent accepted the session
//   started rank 0                     the agent ran the command
//   exited rank 0 code <c> error_file_json <first 200 bytes, escaped>
//   agent error: <message>             the agent refused the StartGroup (a path outside its job's directory)
// Credentials: plaintext by default; --secret-dir D: a launcher's (cluster CA + token); --worker: a worker's
// (DTRAIN_TLS_CA/CERT/KEY from the environment, no token).

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include <grpcpp/grpcpp.h>

#include "agent/security/credentials.h"
#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "dtrain/v1/session.grpc.pb.h"

namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
    else out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
  }
  return out;
}

std::string read_file(const char* variable) {
  const char* path = std::getenv(variable);
  std::ifstream in(path ? path : "");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int usage() {
  std::fprintf(stderr, "usage: dtrain-session-probe ADDRESS [--secret-dir D | --worker] [--command SH] "
                       "[--log-path P] [--error-file P] [--timeout-s S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string address = argv[1];
  std::string secret_dir, command = "id", log_path = "attempt_0/rank_0.log", error_file = "attempt_0/rank_0_error.json";
  bool worker = false;
  int timeout_s = 20;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--worker") {
      worker = true;
      continue;
    }
    if (i + 1 >= argc) return usage();
    const std::string value = argv[++i];
    if (flag == "--secret-dir") secret_dir = value;
    else if (flag == "--command") command = value;
    else if (flag == "--log-path") log_path = value;
    else if (flag == "--error-file") error_file = value;
    else if (flag == "--timeout-s") timeout_s = std::atoi(value.c_str());
    else return usage();
  }

  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  try {
    if (!secret_dir.empty()) {
      auto secret = dtrain::security::load_secret(secret_dir);
      credentials = dtrain::security::channel_credentials(secret, dtrain::security::issue_identity(secret, "probe"));
      dtrain::security::set_tls_target(args);
    } else if (worker) {
      dtrain::security::Identity identity{read_file("DTRAIN_TLS_KEY"), read_file("DTRAIN_TLS_CERT")};
      credentials = dtrain::security::worker_channel_credentials(read_file("DTRAIN_TLS_CA"), identity);
      dtrain::security::set_tls_target(args);
    }
  } catch (const std::exception& e) {
    std::printf("refused: cannot load credentials: %s\n", e.what());
    return 3;
  }
  auto stub = dtrain::v1::AgentService::NewStub(grpc::CreateCustomChannel(address, credentials, args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
  auto stream = stub->Session(&context);
  dtrain::v1::AgentMessage message;
  if (!stream->Read(&message) || !message.has_hello()) {
    grpc::Status status = stream->Finish();
    std::printf("refused: %d %s\n", static_cast<int>(status.error_code()), status.error_message().c_str());
    return 3;
  }
  std::printf("hello\n");
  std::fflush(stdout);

  dtrain::v1::LauncherMessage out;
  auto* configure = out.mutable_configure();
  configure->set_job_id("probe-" + std::to_string(::getpid()));
  configure->set_lease_ms(static_cast<std::uint32_t>(timeout_s) * 1000);
  configure->set_heartbeat_interval_ms(1000);
  configure->set_stop_grace_ms(1000);
  stream->Write(out);
  out.Clear();
  auto* start = out.mutable_start_group();
  start->set_round(0);
  start->set_round_token("probe-round-token");
  auto* spec = start->add_workers();
  spec->set_rank(0);
  for (const char* word : {"/bin/sh", "-c"}) spec->add_argv(word);
  spec->add_argv(command);
  spec->set_working_dir("/");
  spec->set_log_path(log_path);
  spec->set_error_file(error_file);
  stream->Write(out);

  // Prints what one message says; true once the probe has its answer (the worker exited, or the agent refused).
  const auto report = [](const dtrain::v1::AgentMessage& m) {
    if (m.has_worker_started()) {
      std::printf("started rank %u\n", m.worker_started().rank());
    } else if (m.has_worker_exited()) {
      const auto& x = m.worker_exited();
      std::printf("exited rank %u code %d error_file_json %s\n", x.rank(), x.exit_code(),
                  escaped(x.error_file_json()).c_str());
      return true;
    } else if (m.has_error()) {
      std::printf("agent error: %s\n", escaped(m.error().message()).c_str());
      return true;
    }
    return false;
  };
  bool answered = false;
  while (!answered && stream->Read(&message)) {
    // What the agent had waiting comes as one Batch (agent/session/message_batch.h).
    if (message.has_batch()) {
      for (const auto& inner : message.batch().messages()) answered = answered || report(inner);
    } else {
      answered = report(message);
    }
    std::fflush(stdout);
  }
  out.Clear();
  out.mutable_shutdown()->set_reason("probe done");
  stream->Write(out);
  stream->WritesDone();
  while (stream->Read(&message)) {
  }
  stream->Finish();
  std::fflush(stdout);
  return 0;
}
