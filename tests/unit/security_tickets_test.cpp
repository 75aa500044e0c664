// Session tickets off (session_tickets.h): a real gRPC server built by server_credentials sends a raw OpenSSL
// client none after a full mutual-TLS handshake (OpenSSL's default is two), and the system configuration's ssl
// settings survive, checked in a child process that reads its own OpenSSL configuration at start.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>

#include "agent/security/credentials.h"
#include "agent/security/session_tickets.h"
#include "agent/service/store_service.h"
#include "agent/store/store.h"
#include "tests/unit/temp_dir.h"

namespace {

constexpr const char* kChildEnv = "DTRAIN_TEST_TICKETS_CHILD";
constexpr const char* kDoneEnv = "DTRAIN_TEST_TICKETS_DONE";
// No comma: the child is run with this name as its test filter.
constexpr const char* kSettingsCase = "the system configuration's ssl settings are kept and its NumTickets is not";

std::atomic<int> tickets{0};

int count_ticket(SSL*, SSL_SESSION*) {
  ++tickets;
  return 0;   // not kept: the caller frees it
}

// A client context holding `identity` and trusting the cluster CA, as an agent's would, offering HTTP/2.
SSL_CTX* client_context(const dtrain::security::ClusterSecret& secret, const dtrain::security::Identity& identity) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  REQUIRE(ctx);
  const auto pem = [](const std::string& text) { return BIO_new_mem_buf(text.data(), static_cast<int>(text.size())); };
  BIO* cert = pem(identity.cert_pem);
  BIO* key = pem(identity.key_pem);
  BIO* ca = pem(secret.ca_cert_pem);
  X509* cert_x509 = PEM_read_bio_X509(cert, nullptr, nullptr, nullptr);
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(key, nullptr, nullptr, nullptr);
  X509* ca_x509 = PEM_read_bio_X509(ca, nullptr, nullptr, nullptr);
  REQUIRE(SSL_CTX_use_certificate(ctx, cert_x509) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey(ctx, pkey) == 1);
  REQUIRE(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca_x509) == 1);
  X509_free(cert_x509);
  EVP_PKEY_free(pkey);
  X509_free(ca_x509);
  BIO_free(cert);
  BIO_free(key);
  BIO_free(ca);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  static const unsigned char kH2[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx, kH2, sizeof kH2);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, count_ticket);
  return ctx;
}

// One full handshake with the server on 127.0.0.1:`port`, then reads what follows it for a second (gRPC's HTTP/2
// settings, and the tickets if any: a TLS 1.3 server sends them right after the handshake). Tickets received.
int tickets_after_handshake(int port, SSL_CTX* ctx) {
  tickets = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  timeval wait{0, 200'000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  REQUIRE_MESSAGE(SSL_connect(ssl) == 1, ERR_reason_error_string(ERR_get_error()));
  char buffer[4096];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    if (SSL_read(ssl, buffer, sizeof buffer) <= 0 && SSL_get_error(ssl, 0) != SSL_ERROR_WANT_READ &&
        errno != EAGAIN) {
      break;
    }
  }
  ERR_clear_error();
  SSL_free(ssl);
  ::close(fd);
  return tickets;
}

}  // namespace

TEST_CASE("a dtrain TLS server sends no session tickets after a full handshake") {
  TempDir dir("dtrain-tickets-test");
  dtrain::security::init_secret(dir.path, false);
  const auto secret = dtrain::security::load_secret(dir.path);
  dtrain::store::Store store;
  dtrain::agent::StoreService service{store};
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0",
                           dtrain::security::server_credentials(secret, dtrain::security::issue_identity(secret, "agent")),
                           &port);
  auto server = builder.BuildAndStart();
  REQUIRE(server);
  SSL_CTX* ctx = client_context(secret, dtrain::security::issue_identity(secret, "launcher"));
  CHECK(tickets_after_handshake(port, ctx) == 0);
  SSL_CTX_free(ctx);
  store.shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

TEST_CASE(kSettingsCase) {
  if (std::getenv(kChildEnv)) {
    // The child: its OpenSSL configuration is the parent's file.
    CHECK(dtrain::security::disable_session_tickets());
    SSL_CTX* ctx = SSL_CTX_new(TLS_method());
    REQUIRE(ctx);
    CHECK(SSL_CTX_get_num_tickets(ctx) == 0);
    CHECK(SSL_CTX_get_min_proto_version(ctx) == TLS1_3_VERSION);
    SSL_CTX_free(ctx);
    std::ofstream(std::getenv(kDoneEnv)) << "ran\n";   // proof that the filter found this case
    return;
  }
  TempDir dir("dtrain-tickets-conf");
  const std::string conf = dir.file("openssl.cnf");
  const std::string done = dir.file("done");
  std::ofstream(conf) << "openssl_conf = init\n[init]\nssl_conf = ssl_sect\n[ssl_sect]\nsystem_default = sd\n"
                         "[sd]\nMinProtocol = TLSv1.3\nNumTickets = 3\n";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("OPENSSL_CONF", conf.c_str(), 1);
    ::setenv(kChildEnv, "1", 1);
    ::setenv(kDoneEnv, done.c_str(), 1);
    const std::string filter = std::string("--test-case=") + kSettingsCase;
    ::execl("/proc/self/exe", "/proc/self/exe", filter.c_str(), "--no-intro", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::ifstream(done).good());
}
