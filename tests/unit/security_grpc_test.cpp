// Mutual TLS + cluster token over real gRPC: a StoreService on 127.0.0.1:0 behind server_credentials, called
// through the generated stub with every kind of wrong credential. Each refusal must happen before the handler
// (the key must not be set) and be explained by explain_connect_failure.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/security/credentials.h"
#include "agent/service/store_service.h"
#include "agent/store/store.h"
#include "dtrain/v1/store.grpc.pb.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/contains.h"

using namespace std::chrono_literals;
using dtrain::security::ClusterSecret;
using dtrain::security::Identity;
using dtrain::security::Transport;
using dtrain::security::explain_connect_failure;

namespace {

constexpr char kRoundToken[] = "round-token-0";
const std::string kHandshakeFailed =
    " failed: the peer's certificate is not signed by this cluster's CA, has expired, or the peer rejected ours; "
    "check both sides use the same secret dir and the clocks agree";

// A cluster: its secret and a launcher identity derived from it.
struct Cluster {
  TempDir dir{"dtrain-tls-test"};
  ClusterSecret secret;
  Identity launcher;
  Cluster() {
    dtrain::security::init_secret(dir.path, false);
    secret = dtrain::security::load_secret(dir.path);
    launcher = dtrain::security::issue_identity(secret, "launcher");
  }
  // An agent's server credentials with a freshly derived certificate.
  std::shared_ptr<grpc::ServerCredentials> server_credentials() const {
    return dtrain::security::server_credentials(secret, dtrain::security::issue_identity(secret, "agent"));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials() const {
    return dtrain::security::channel_credentials(secret, launcher);
  }
};

struct Server {
  dtrain::store::Store store;
  dtrain::agent::StoreService service{store};
  std::unique_ptr<grpc::Server> server;
  std::string address;

  explicit Server(std::shared_ptr<grpc::ServerCredentials> credentials) {
    REQUIRE(store.open_namespace(kRoundToken).ok());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", std::move(credentials), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server);
    REQUIRE(port != 0);
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~Server() {
    store.shutdown();
    server->Shutdown(std::chrono::system_clock::now() + 1s);
  }

  // True when a handler stored `key`: a refused call must never get that far.
  bool has(const std::string& key) {
    std::vector<std::string> keys{key};
    return store.check(kRoundToken, keys).value;
  }
};

std::shared_ptr<grpc::Channel> channel_to(const std::string& address,
                                          std::shared_ptr<grpc::ChannelCredentials> credentials,
                                          bool tls_target = true) {
  grpc::ChannelArguments args;
  if (tls_target) dtrain::security::set_tls_target(args);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

// Sets `key` on the store through a fresh channel; the first call on a channel also makes the connection.
grpc::Status set_key(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                     const std::string& key, bool tls_target = true) {
  auto stub = dtrain::v1::Store::NewStub(channel_to(address, std::move(credentials), tls_target));
  grpc::ClientContext context;
  context.AddMetadata("dtrain-token", kRoundToken);
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  dtrain::v1::SetRequest request;
  request.set_key(key);
  request.set_value("v");
  dtrain::v1::SetResponse response;
  return stub->Set(&context, request, &response);
}

}  // namespace

TEST_CASE("a launcher with the cluster's certificate and token reaches the handler") {
  Cluster cluster;
  Server server(cluster.server_credentials());
  grpc::Status status = set_key(server.address, cluster.credentials(), "hello");
  CHECK_MESSAGE(status.ok(), status.error_message());
  CHECK(server.has("hello"));
}

TEST_CASE("concurrent calls from several channels are all checked and all pass") {
  Cluster cluster;
  Server server(cluster.server_credentials());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto stub = dtrain::v1::Store::NewStub(channel_to(server.address, cluster.credentials()));
      for (int i = 0; i < 10; ++i) {
        grpc::ClientContext context;
        context.AddMetadata("dtrain-token", kRoundToken);
        context.set_deadline(std::chrono::system_clock::now() + 10s);
        dtrain::v1::SetRequest request;
        request.set_key("k" + std::to_string(t) + "-" + std::to_string(i));
        dtrain::v1::SetResponse response;
        if (stub->Set(&context, request, &response).ok()) ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(ok == 40);
  CHECK(server.store.num_keys(kRoundToken).value == 40);
}

TEST_CASE("a wrong or missing cluster token is refused before the handler runs") {
  Cluster cluster;
  Server server(cluster.server_credentials());

  SUBCASE("wrong token") {
    ClusterSecret other_token = cluster.secret;
    other_token.token = std::string(64, 'a');
    grpc::Status status =
        set_key(server.address, dtrain::security::channel_credentials(other_token, cluster.launcher), "k");
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(status.error_message() ==
          "cluster token does not match this agent's (check that launcher and agents use the same `dtrain secret "
          "init` directory)");
    CHECK_FALSE(contains(status.error_message(), cluster.secret.token));
    CHECK(explain_connect_failure(server.address, status) == server.address + " refused the call: " +
                                                                 status.error_message());
  }
  SUBCASE("no token: TLS with the right certificate but no call credentials") {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = cluster.secret.ca_cert_pem;
    options.pem_private_key = cluster.launcher.key_pem;
    options.pem_cert_chain = cluster.launcher.cert_pem;
    grpc::Status status = set_key(server.address, grpc::SslCredentials(options), "k");
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(status.error_message() == "cluster token missing");
    CHECK(explain_connect_failure(server.address, status) ==
          server.address + " refused the call: cluster token missing");
  }
  CHECK_FALSE(server.has("k"));
}

TEST_CASE("the server refuses a client certificate that is foreign, missing or expired") {
  Cluster cluster;
  Cluster other;
  Server server(cluster.server_credentials());
  std::shared_ptr<grpc::ChannelCredentials> credentials;

  SUBCASE("signed by another cluster's CA (right token, trusts the right CA)") {
    credentials = dtrain::security::channel_credentials(cluster.secret, other.launcher);
  }
  SUBCASE("no client certificate") {
    credentials = dtrain::security::channel_credentials(cluster.secret, Identity{});
  }
  SUBCASE("expired") {
    credentials = dtrain::security::channel_credentials(
        cluster.secret, dtrain::security::issue_identity(cluster.secret, "old", -2h, 1h));
  }
  grpc::Status status = set_key(server.address, credentials, "k");
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(status.error_message() ==
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:" + server.address + ": Socket closed");
  CHECK(explain_connect_failure(server.address, status) ==
        "TLS handshake with " + server.address + kHandshakeFailed + " (gRPC: Socket closed)");
  CHECK_FALSE(server.has("k"));
}

TEST_CASE("the client refuses a server certificate that is foreign or expired") {
  Cluster cluster;
  Cluster other;
  std::unique_ptr<Server> server;
  SUBCASE("signed by another cluster's CA") {
    server = std::make_unique<Server>(other.server_credentials());
  }
  SUBCASE("expired") {
    server = std::make_unique<Server>(dtrain::security::server_credentials(
        cluster.secret, dtrain::security::issue_identity(cluster.secret, "agent", -2h, 1h)));
  }
  grpc::Status status = set_key(server->address, cluster.credentials(), "k");
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  const std::string verify_failed =
      "Ssl handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed";
  CHECK(status.error_message() == "failed to connect to all addresses; last error: UNKNOWN: ipv4:" +
                                      server->address + ": " + verify_failed);
  CHECK(explain_connect_failure(server->address, status) ==
        "TLS handshake with " + server->address + kHandshakeFailed + " (gRPC: " + verify_failed + ")");
  CHECK_FALSE(server->has("k"));
}

TEST_CASE("a client that skips the target-name override is told so") {
  Cluster cluster;
  Server server(cluster.server_credentials());
  grpc::Status status = set_key(server.address, cluster.credentials(), "k", /*tls_target=*/false);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(contains(status.error_message(), "Peer name 127.0.0.1 is not in peer certificate"));
  CHECK(explain_connect_failure(server.address, status) ==
        "TLS handshake with " + server.address +
            " failed: the peer's certificate is not for dtrain.cluster (the channel lacks set_tls_target, or the peer "
            "is not a dtrain agent) (gRPC: Peer name 127.0.0.1 is not in peer certificate)");
  CHECK_FALSE(server.has("k"));
}

TEST_CASE("plaintext and TLS do not talk to each other, and the explanation says which side is which") {
  Cluster cluster;
  SUBCASE("plaintext client to a TLS server") {
    Server server(cluster.server_credentials());
    grpc::Status status = set_key(server.address, grpc::InsecureChannelCredentials(), "k", false);
    CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK(contains(status.error_message(), "Socket closed"));
    CHECK(explain_connect_failure(server.address, status, Transport::plaintext) ==
          server.address +
              " closed the connection: it requires TLS (it was started without --insecure); give this side the "
              "cluster secret instead of --insecure (gRPC: Socket closed)");
    CHECK_FALSE(server.has("k"));
  }
  SUBCASE("TLS client to a plaintext server") {
    Server server(grpc::InsecureServerCredentials());
    grpc::Status status = set_key(server.address, cluster.credentials(), "k");
    CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK(contains(status.error_message(), "wrong version number"));
    CHECK(explain_connect_failure(server.address, status) ==
          server.address +
              " speaks plaintext (started with --insecure?) (gRPC: Ssl handshake failed: SSL_ERROR_SSL: "
              "error:0A00010B:SSL routines::wrong version number)");
    CHECK_FALSE(server.has("k"));
  }
}

TEST_CASE("WaitForConnected passes a token failure but waits out a handshake failure with no reason") {
  Cluster cluster;
  Cluster other;
  Server server(cluster.server_credentials());

  ClusterSecret other_token = cluster.secret;
  other_token.token = std::string(64, 'b');
  auto token_channel = channel_to(server.address, dtrain::security::channel_credentials(other_token, cluster.launcher));
  CHECK(token_channel->WaitForConnected(std::chrono::system_clock::now() + 5s));

  auto foreign = channel_to(server.address, dtrain::security::channel_credentials(cluster.secret, other.launcher));
  CHECK_FALSE(foreign->WaitForConnected(std::chrono::system_clock::now() + 300ms));
  CHECK(foreign->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE);
  CHECK(explain_connect_failure(server.address, "") ==
        "cannot connect to " + server.address + "; is `dtrain agent` running there and is the port reachable?");
  // One call on the failed channel fails at once with the reason.
  auto stub = dtrain::v1::Store::NewStub(foreign);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  dtrain::v1::NumKeysRequest request;
  dtrain::v1::NumKeysResponse response;
  grpc::Status status = stub->NumKeys(&context, request, &response);
  CHECK(contains(explain_connect_failure(server.address, status), "TLS handshake with " + server.address + " failed"));
}
