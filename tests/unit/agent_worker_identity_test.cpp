// Workers' least privilege over real gRPC: a worker certificate (issued per job, no cluster token) opens its job's
// store while its agent runs that job, and nothing else: not the store once the job ended or of another job, not
// a session with an agent, not a launcher's join server, and it cannot serve TLS (so it cannot pose as an agent).
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/security/credentials.h"
#include "agent/security/identity.h"
#include "agent/service/session_service.h"
#include "agent/service/store_service.h"
#include "agent/store/store.h"
#include "dtrain/v1/session.grpc.pb.h"
#include "dtrain/v1/store.grpc.pb.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/contains.h"

using namespace std::chrono_literals;
using dtrain::security::ClusterSecret;
using dtrain::security::Identity;

namespace {

constexpr char kRoundToken[] = "round-token-0";
constexpr char kIdentityJob[] = "tiny-20261130-120000";

struct Cluster {
  TempDir dir{"dtrain-worker-id-test"};
  ClusterSecret secret;
  Identity launcher;
  Identity worker;
  Cluster() {
    dtrain::security::init_secret(dir.path, false);
    secret = dtrain::security::load_secret(dir.path);
    launcher = dtrain::security::issue_identity(secret, "launcher");
    worker = dtrain::security::issue_worker_identity(secret, kIdentityJob, "node0");
  }
  std::shared_ptr<grpc::ChannelCredentials> as_launcher() const {
    return dtrain::security::channel_credentials(secret, launcher);
  }
  std::shared_ptr<grpc::ChannelCredentials> as_worker() const {
    return dtrain::security::worker_channel_credentials(secret.ca_cert_pem, worker);
  }
};

// An agent's gRPC face: store and session services behind the agent's credentials and its worker admission.
struct AgentServer {
  dtrain::store::Store store;
  dtrain::agent::StoreService store_service{store};
  dtrain::agent::Agent agent{dtrain::agent::AgentOptions{}};
  dtrain::agent::SessionService session_service{agent};
  std::shared_ptr<dtrain::security::WorkerAdmission> admission = std::make_shared<dtrain::security::WorkerAdmission>();
  std::unique_ptr<grpc::Server> server;
  std::string address;

  AgentServer(const Cluster& cluster, Identity identity, bool admit_workers = true) {
    REQUIRE(store.open_namespace(kRoundToken).ok());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0",
                             dtrain::security::server_credentials(cluster.secret, identity,
                                                                  admit_workers ? admission : nullptr),
                             &port);
    builder.RegisterService(&store_service);
    builder.RegisterService(&session_service);
    server = builder.BuildAndStart();
    REQUIRE(server);
    address = "127.0.0.1:" + std::to_string(port);
  }
  explicit AgentServer(const Cluster& cluster, bool admit_workers = true)
      : AgentServer(cluster, dtrain::security::issue_identity(cluster.secret, "agent"), admit_workers) {}
  // True when a handler stored `key`: a refused call must never get that far.
  bool has(const std::string& key) {
    const std::vector<std::string> keys{key};
    return store.check(kRoundToken, keys).value;
  }
  ~AgentServer() {
    store.shutdown();
    server->Shutdown(std::chrono::system_clock::now() + 1s);
  }
};

std::shared_ptr<grpc::Channel> channel_to(const std::string& address,
                                          std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  dtrain::security::set_tls_target(args);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

grpc::Status set_key(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                     const std::string& key) {
  auto stub = dtrain::v1::Store::NewStub(channel_to(address, std::move(credentials)));
  grpc::ClientContext context;
  context.AddMetadata("dtrain-token", kRoundToken);
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  dtrain::v1::SetRequest request;
  request.set_key(key);
  request.set_value("v");
  dtrain::v1::SetResponse response;
  return stub->Set(&context, request, &response);
}

// Opens AgentService.Session and reads its first message: a refused session ends with the refusal instead.
grpc::Status open_session(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                          const std::string& extra_token = "") {
  auto stub = dtrain::v1::AgentService::NewStub(channel_to(address, std::move(credentials)));
  grpc::ClientContext context;
  if (!extra_token.empty()) context.AddMetadata(dtrain::security::kClusterTokenMetadata, extra_token);
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->Session(&context);
  dtrain::v1::AgentMessage message;
  if (stream->Read(&message)) return grpc::Status(grpc::StatusCode::OK, "the agent said hello");
  return stream->Finish();
}

}  // namespace

TEST_CASE("a worker certificate opens its job's store while the agent runs that job, and only then") {
  Cluster cluster;
  AgentServer agent(cluster);
  SUBCASE("no job on the agent yet") {
    grpc::Status status = set_key(agent.address, cluster.as_worker(), "k");
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(contains(status.error_message(), std::string("a worker certificate of job ") + kIdentityJob));
  }
  SUBCASE("its job runs") {
    agent.admission->admit(kIdentityJob);
    grpc::Status status = set_key(agent.address, cluster.as_worker(), "k");
    CHECK_MESSAGE(status.ok(), status.error_message());
    CHECK(agent.has("k"));
    SUBCASE("then the job ends") {
      agent.admission->close();
      status = set_key(agent.address, cluster.as_worker(), "k2");
      CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      CHECK_FALSE(agent.has("k2"));
    }
  }
  SUBCASE("another job runs") {
    agent.admission->admit("other-20261130-120000");
    grpc::Status status = set_key(agent.address, cluster.as_worker(), "k");
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_FALSE(agent.has("k"));
  }
}

TEST_CASE("a worker certificate never opens a session, with or without the cluster token") {
  Cluster cluster;
  AgentServer agent(cluster);
  agent.admission->admit(kIdentityJob);
  SUBCASE("worker certificate alone") {
    grpc::Status status = open_session(agent.address, cluster.as_worker());
    CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(contains(status.error_message(), "a worker's certificate cannot open a session"));
  }
  SUBCASE("worker certificate with the cluster token in the call") {
    grpc::Status status = open_session(agent.address, cluster.as_worker(), cluster.secret.token);
    CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(contains(status.error_message(), "a worker's certificate cannot open a session"));
  }
  SUBCASE("a launcher's certificate without the token") {
    grpc::Status status = open_session(agent.address, dtrain::security::worker_channel_credentials(
                                                          cluster.secret.ca_cert_pem, cluster.launcher));
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(status.error_message() == "cluster token missing");
  }
}

TEST_CASE("a launcher's join server (no admission) refuses worker certificates outright") {
  Cluster cluster;
  AgentServer launcher_side(cluster, /*admit_workers=*/false);
  grpc::Status status = set_key(launcher_side.address, cluster.as_worker(), "k");
  CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(contains(status.error_message(), "this launcher does not run it"));
  CHECK(set_key(launcher_side.address, cluster.as_launcher(), "k").ok());
}

TEST_CASE("a worker certificate cannot serve TLS: a launcher does not take it for an agent") {
  Cluster cluster;
  AgentServer impostor(cluster, cluster.worker);
  grpc::Status status = set_key(impostor.address, cluster.as_launcher(), "k");
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_FALSE(impostor.has("k"));
}

TEST_CASE("worker certificates name a valid job id only") {
  Cluster cluster;
  for (const char* bad : {"", "..", "a/b", "a,URI:spiffe://dtrain.cluster/member", "x y"}) {
    CHECK_THROWS_AS(dtrain::security::issue_worker_identity(cluster.secret, bad, "node0"),
                    dtrain::security::SecurityError);
  }
  CHECK(dtrain::security::is_valid_job_id("tiny-gpt-20261130-120000-2"));
}
