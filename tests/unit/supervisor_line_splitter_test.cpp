#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "agent/supervisor/line_splitter.h"

using dtrain::supervisor::LineSplitter;

namespace {

std::vector<std::string> feed_in_chunks(LineSplitter& splitter, const std::string& data, std::size_t chunk) {
  std::vector<std::string> out;
  const auto emit = [&](std::string_view line) { out.emplace_back(line); };
  for (std::size_t at = 0; at < data.size(); at += chunk) splitter.feed(std::string_view(data).substr(at, chunk), emit);
  splitter.finish(emit);
  return out;
}

}  // namespace

TEST_CASE("line splitter: lines without newline, empty lines kept, partial held until finish") {
  LineSplitter splitter;
  std::vector<std::string> out;
  const auto emit = [&](std::string_view line) { out.emplace_back(line); };
  splitter.feed("one\ntw", emit);
  CHECK(out == std::vector<std::string>{"one"});
  CHECK(splitter.pending() == 2);
  splitter.feed("o\n\nthree", emit);
  CHECK(out == std::vector<std::string>{"one", "two", ""});
  splitter.finish(emit);
  CHECK(out == std::vector<std::string>{"one", "two", "", "three"});
  splitter.finish(emit);
  CHECK(out.size() == 4);
}

TEST_CASE("line splitter: a line over the limit comes in pieces, however the input is chunked") {
  const std::string data = std::string(200 * 1024, 'x') + "\nend\n";
  for (const std::size_t chunk : {data.size(), std::size_t{65536}, std::size_t{4096}, std::size_t{1}}) {
    CAPTURE(chunk);
    LineSplitter splitter(64 * 1024);
    const auto out = feed_in_chunks(splitter, data, chunk);
    REQUIRE(out.size() == 5);
    CHECK(out[0].size() == 65536);
    CHECK(out[1].size() == 65536);
    CHECK(out[2].size() == 65536);
    CHECK(out[3].size() == 200 * 1024 - 3 * 65536);
    CHECK(out[4] == "end");
  }
}

TEST_CASE("line splitter: a line of exactly the limit is one line, also when its newline comes later") {
  const std::string data = std::string(8, 'a') + "\n" + std::string(9, 'b') + "\n";
  for (const std::size_t chunk : {data.size(), std::size_t{8}, std::size_t{3}, std::size_t{1}}) {
    CAPTURE(chunk);
    LineSplitter splitter(8);
    const auto out = feed_in_chunks(splitter, data, chunk);
    CHECK(out == std::vector<std::string>{"aaaaaaaa", "bbbbbbbb", "b"});
  }
}
