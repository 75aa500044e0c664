// env_int (trainer/common/env.h): unset gives the default, a set value must be an integer, and a bad one is an
// error that names the variable, its value and what it should hold, never a silent default.
#include <doctest/doctest.h>

#include "tests/unit/scoped_env.h"
#include "trainer/common/env.h"

using dtrain::StatusCode;
using dtrain::trainer::env_int;
using dtrain::trainer::openmp_threads;

TEST_CASE("env_int: unset gives the default, an integer gives its value") {
  {
    ScopedEnv env{{"DTRAIN_TEST_INT", nullptr}};
    const auto value = env_int("DTRAIN_TEST_INT", 7, "a count");
    REQUIRE(value.ok());
    CHECK(value.value == 7);
  }
  for (const auto& [text, expected] : {std::pair{"12", 12}, std::pair{"-3", -3}, std::pair{"0", 0}}) {
    ScopedEnv env{{"DTRAIN_TEST_INT", text}};
    const auto value = env_int("DTRAIN_TEST_INT", 7, "a count");
    REQUIRE(value.ok());
    CHECK(value.value == expected);
  }
}

TEST_CASE("env_int: a value that is not an integer is an error naming the variable, the value and the hint") {
  for (const char* text : {"", "two", "4,2", " 4", "4 ", "99999999999"}) {
    CAPTURE(text);
    ScopedEnv env{{"DTRAIN_TEST_INT", text}};
    const auto value = env_int("DTRAIN_TEST_INT", 7, "set it to a count");
    REQUIRE_FALSE(value.ok());
    CHECK(value.status.code() == StatusCode::invalid_argument);
    CHECK(value.status.message() ==
          "DTRAIN_TEST_INT='" + std::string(text) + "' is not an integer; set it to a count");
  }
}

TEST_CASE("openmp_threads: OMP_NUM_THREADS as OpenMP reads it; what it cannot read means every core, with a warning") {
  for (const auto& [text, expected] : {std::pair{"8", 8}, std::pair{"4,2", 4}, std::pair{"1", 1}}) {
    CAPTURE(text);
    ScopedEnv env{{"OMP_NUM_THREADS", text}};
    std::string warning;
    CHECK(openmp_threads(warning) == expected);
    CHECK(warning.empty());
  }
  for (const char* text : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnv env{{"OMP_NUM_THREADS", text}};
    std::string warning;
    CHECK(openmp_threads(warning) == 0);
    CHECK(warning.empty());
  }
  for (const char* text : {"two", "0", "-1", ",4"}) {
    CAPTURE(text);
    ScopedEnv env{{"OMP_NUM_THREADS", text}};
    std::string warning;
    CHECK(openmp_threads(warning) == 0);
    CHECK(warning.find("OMP_NUM_THREADS='" + std::string(text) + "' is not a number of threads") == 0);
  }
}
