#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <grpcpp/grpcpp.h>

#include "worker/credentials.h"

using namespace dtrain;

namespace {

// Sets DTRAIN_TLS_CA for one case and removes it after.
struct CaVariable {
  explicit CaVariable(const std::string& path) { ::setenv("DTRAIN_TLS_CA", path.c_str(), 1); }
  ~CaVariable() { ::unsetenv("DTRAIN_TLS_CA"); }
};

// credentials_from_env's answer for DTRAIN_TLS_CA=path, and how long it took.
std::pair<Status, double> from_env(const std::string& path) {
  CaVariable variable(path);
  grpc::ChannelArguments arguments;
  const auto start = std::chrono::steady_clock::now();
  const auto result = worker::credentials_from_env(arguments);
  return {result.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

}  // namespace

TEST_CASE("a worker's TLS file that is a FIFO or a device is refused at once, naming the variable and the path") {
  char dir_template[] = "/tmp/dtrain-worker-tls-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string fifo = std::string(dir_template) + "/ca.pem";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {fifo, std::string("/dev/zero"), std::string("/nonexistent/ca.pem")}) {
    const auto [status, seconds] = from_env(path);
    CHECK_MESSAGE(status.code() == StatusCode::not_found, path);
    CHECK_MESSAGE(status.message().find("cannot read DTRAIN_TLS_CA (" + path + ")") != std::string::npos,
                  status.message());
    CHECK_MESSAGE(seconds < 1.0, path, " took ", seconds, " s");
  }
  ::unlink(fifo.c_str());
  ::rmdir(dir_template);
}

TEST_CASE("without DTRAIN_TLS_CA a worker's channel is plaintext") {
  ::unsetenv("DTRAIN_TLS_CA");
  grpc::ChannelArguments arguments;
  const auto result = worker::credentials_from_env(arguments);
  REQUIRE(result.ok());
  CHECK(result.value != nullptr);
}
