// make_communicator_from_env's choices and errors, and the single-rank local backend.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/unit/scoped_env.h"
#include "trainer/comm/bench.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/gloo/network.h"

using dtrain::trainer::CommError;
using dtrain::trainer::make_communicator_from_env;

namespace {

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const CommError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("without WORLD_SIZE, or with WORLD_SIZE=1, the communicator is the local one") {
  for (const char* world : {static_cast<const char*>(nullptr), "1"}) {
    ScopedEnv env{{"WORLD_SIZE", world}, {"RANK", "0"}};
    auto comm = make_communicator_from_env();
    CHECK(comm->backend() == "local");
    CHECK(comm->rank() == 0);
    CHECK(comm->size() == 1);
    std::vector<float> data = {1, 2, 3};
    auto work = comm->allreduce(data.data(), data.size());
    CHECK(work->done());
    work->wait();
    CHECK(data == std::vector<float>{1, 2, 3});
    std::vector<float> out(3);
    comm->reduce_scatter(data.data(), out.data(), 3)->wait();
    CHECK(out == data);
    std::vector<float> gathered(3);
    comm->all_gather(data.data(), gathered.data(), 3)->wait();
    CHECK(gathered == data);
    comm->broadcast(data.data(), 3, 0)->wait();
    CHECK_THROWS_AS(comm->broadcast(data.data(), 3, 1), CommError);
  }
}

TEST_CASE("bad or missing variables are named in the error") {
  {
    ScopedEnv env{{"WORLD_SIZE", "two"}};
    CHECK(error_of([] { make_communicator_from_env(); }).find("WORLD_SIZE='two'") != std::string::npos);
  }
  {
    ScopedEnv env{{"WORLD_SIZE", "0"}};
    CHECK(error_of([] { make_communicator_from_env(); }).find("WORLD_SIZE=0") != std::string::npos);
  }
  {
    ScopedEnv env{{"WORLD_SIZE", "2"}, {"RANK", nullptr}};
    CHECK(error_of([] { make_communicator_from_env(); }).find("RANK is not set") != std::string::npos);
  }
  {
    ScopedEnv env{{"WORLD_SIZE", "2"}, {"RANK", "2"}};
    CHECK(error_of([] { make_communicator_from_env(); }).find("RANK=2 is outside") != std::string::npos);
  }
  {
    ScopedEnv env{{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"DTRAIN_STORE_ADDR", nullptr}};
    const std::string message = error_of([] { make_communicator_from_env(); });
    CHECK(message.find("store") != std::string::npos);
    CHECK(message.find("DTRAIN_STORE_ADDR") != std::string::npos);
  }
}

TEST_CASE("the network: GLOO_SOCKET_IFNAME first, else the route to MASTER_ADDR, else loopback") {
  {
    ScopedEnv env{{"GLOO_SOCKET_IFNAME", "lo,eth0"}, {"MASTER_ADDR", "127.0.0.1"}};
    auto network = dtrain::trainer::gloo_network_from_env();
    CHECK(network.interface == "lo");
    CHECK(network.hostname.empty());
  }
  {
    ScopedEnv env{{"GLOO_SOCKET_IFNAME", nullptr}, {"MASTER_ADDR", "127.0.0.1"}};
    auto network = dtrain::trainer::gloo_network_from_env();
    CHECK(network.interface.empty());
    CHECK(network.hostname == "127.0.0.1");
    CHECK(network.reason.find("MASTER_ADDR") != std::string::npos);
  }
  {
    ScopedEnv env{{"GLOO_SOCKET_IFNAME", nullptr}, {"MASTER_ADDR", nullptr}};
    auto network = dtrain::trainer::gloo_network_from_env();
    CHECK(network.hostname == "127.0.0.1");
    CHECK(network.reason.find("loopback") != std::string::npos);
  }
  {
    ScopedEnv env{{"GLOO_SOCKET_IFNAME", nullptr}, {"MASTER_ADDR", "no-such-host.invalid"}};
    CHECK_THROWS_AS(dtrain::trainer::gloo_network_from_env(), CommError);
  }
}

TEST_CASE("the collective bench on one rank: every collective, exact, with nccl-tests' size conventions") {
  ScopedEnv env{{"WORLD_SIZE", nullptr}};
  auto comm = make_communicator_from_env();
  for (const char* collective : {"allreduce", "all_gather", "reduce_scatter", "broadcast"}) {
    CAPTURE(collective);
    dtrain::trainer::CollectiveBenchOptions options;
    options.collective = collective;
    options.sizes_bytes = {4096, 1000};
    options.iterations = 2;
    auto rows = dtrain::trainer::run_collective_bench(*comm, options);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].bytes == 4096);
    CHECK(rows[0].count == 1024);
    CHECK(rows[1].bytes == 1000);
    CHECK(rows[0].wrong == 0);
    CHECK(rows[0].busbw_gbps == (std::string(collective) == "broadcast" ? rows[0].algbw_gbps : 0.0));
  }
  dtrain::trainer::CollectiveBenchOptions bad;
  bad.collective = "alltoall";
  CHECK_THROWS_AS(dtrain::trainer::run_collective_bench(*comm, bad), std::invalid_argument);
  auto table = dtrain::trainer::format_collective_bench("allreduce", 1, {});
  CHECK(table.find("busbw") != std::string::npos);
}
