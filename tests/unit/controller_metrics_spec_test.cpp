#include <doctest/doctest.h>

#include "cli/spec/spec.h"
#include "tests/unit/spec_only_error.h"

using namespace dtrain::spec;

TEST_CASE("observe.metrics_addr: off by default, set in YAML or with --set, host:port with port 0 allowed") {
  const std::string base = "name: x\ncommand: [a]\n";
  CHECK(load_spec_string(base, "job.yaml", {}).observe.metrics_addr.empty());
  CHECK(load_spec_string(base + "observe: {metrics_addr: 127.0.0.1:9400}\n", "job.yaml", {}).observe.metrics_addr ==
        "127.0.0.1:9400");
  CHECK(load_spec_string(base, "job.yaml", {"observe.metrics_addr=0.0.0.0:0"}).observe.metrics_addr == "0.0.0.0:0");
  CHECK(load_spec_string(base, "job.yaml", {"observe.metrics_addr='[::1]:9400'"}).observe.metrics_addr ==
        "[::1]:9400");
  CHECK(load_spec_string(base, "job.yaml", {"observe.metrics_addr=localhost:9400"}).observe.metrics_addr ==
        "localhost:9400");
  CHECK(load_spec_string(base, "job.yaml", {"observe.metrics_addr="}).observe.metrics_addr.empty());
}

TEST_CASE("observe.metrics_addr: a bad address is refused at its key with an example") {
  const std::string base = "name: x\ncommand: [a]\n";
  CHECK(only_error(base + "observe: {metrics_addr: 9400}\n") ==
        "job.yaml:3:25: observe.metrics_addr: '9400' has no port. Example: metrics_addr: 127.0.0.1:9400 (port 0: "
        "any free port; [::1]:9400 for IPv6; leave it out to serve no metrics)");
  CHECK(only_error(base, {"observe.metrics_addr=127.0.0.1:70000"}).find("has a port outside 1-65535") !=
        std::string::npos);
  CHECK(only_error(base, {"observe.metrics_addr=::1:9400"}).find("write an IPv6 host in brackets") !=
        std::string::npos);
  CHECK(only_error(base, {"observe.metrics_addr=http://h:1/metrics"}).find("observe.metrics_addr") !=
        std::string::npos);
  CHECK(only_error(base, {"observe.metrics_addr=[1,2]"}).find("observe.metrics_addr") != std::string::npos);
  CHECK(only_error(base + "observe: {metrics: 1}\n").find("Did you mean 'observe.metrics_addr'?") !=
        std::string::npos);
  Spec built = load_spec_string(base, "dtrain run", {});
  built.observe.metrics_addr = "host";
  CHECK_THROWS_AS(validate(built), SpecError);
}
