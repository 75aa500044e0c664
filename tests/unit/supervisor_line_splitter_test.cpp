#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "agent/supervisor/output/line_splitter.h"

using dtrain::supervisor::LineSplitter;

namespace {

std::vector<std::string> feed_in_chunks(LineSplitter& splitter, const std::string& data, std::size_t chunk) {
  std::vector<std::string> out;
  const auto emit = [&](std::string_view line, bool) { out.emplace_back(line); };
  for (std::size_t at = 0; at < data.size(); at += chunk) splitter.feed(std::string_view(data).substr(at, chunk), emit);
  splitter.finish(emit);
  return out;
}

}  // namespace

TEST_CASE("line splitter: lines without newline, empty lines kept, partial held until finish") {
  LineSplitter splitter;
  std::vector<std::string> out;
  const auto emit = [&](std::string_view line, bool) { out.emplace_back(line); };
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

namespace {

// True when `text` is well-formed UTF-8 (no truncated or stray continuation bytes).
bool valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    std::size_t length = byte < 0x80 ? 1 : (byte & 0xE0) == 0xC0 ? 2 : (byte & 0xF0) == 0xE0 ? 3 : (byte & 0xF8) == 0xF0 ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

}  // namespace

TEST_CASE("line splitter: a long line of multi-byte characters is cut only between characters") {
  // "€" is 3 bytes and 65536 is not a multiple of 3: a cut at the limit would split one in two.
  std::string euros;
  for (int i = 0; i < 40000; ++i) euros += "\xE2\x82\xAC";
  const std::string data = euros + "\n" + "\xF0\x9F\x98\x80" + std::string(6, 'z') + "\n";
  for (const std::size_t chunk : {data.size(), std::size_t{65536}, std::size_t{4096}, std::size_t{7}, std::size_t{1}}) {
    CAPTURE(chunk);
    LineSplitter splitter(64 * 1024);
    const auto out = feed_in_chunks(splitter, data, chunk);
    std::string joined;
    for (std::size_t i = 0; i + 1 < out.size(); ++i) {
      CHECK(out[i].size() <= 64 * 1024);
      CHECK(valid_utf8(out[i]));
      joined += out[i];
    }
    CHECK(out.size() == 3);
    CHECK(out[0].size() == 65535);  // 65536 would end inside a character
    CHECK((joined == euros));
    CHECK(out.back() == "\xF0\x9F\x98\x80zzzzzz");
  }
  // A 4-byte character straddling a tiny limit moves whole into the next piece.
  LineSplitter small(5);
  const auto out = feed_in_chunks(small, "ab\xF0\x9F\x98\x80" "cd\n", 1);
  CHECK(out == std::vector<std::string>{"ab", "\xF0\x9F\x98\x80" "c", "d"});
}

TEST_CASE("line splitter: bytes that are not UTF-8 pass through unchanged and still respect the limit") {
  const std::string data = "err\377\n" + std::string(10, '\x80') + "\n";
  LineSplitter splitter(4);
  CHECK(feed_in_chunks(splitter, data, 3) == std::vector<std::string>{"err\377", "\x80\x80\x80\x80", "\x80\x80\x80\x80", "\x80\x80"});
}

TEST_CASE("line splitter: text plus '\\n' only where ends_line is set gives back the input byte for byte") {
  std::string data;
  for (int i = 0; i < 3000; ++i) data += std::string(static_cast<std::size_t>(i % 97), static_cast<char>('a' + i % 26)) + (i % 5 ? "\n" : "");
  data += "\xE2\x82\xACtail without newline";
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{13}, std::size_t{4096}, data.size()}) {
    CAPTURE(chunk);
    LineSplitter splitter(64);
    std::string rebuilt;
    const auto emit = [&](std::string_view text, bool ends_line) {
      rebuilt.append(text);
      if (ends_line) rebuilt.push_back('\n');
    };
    for (std::size_t at = 0; at < data.size(); at += chunk) splitter.feed(std::string_view(data).substr(at, chunk), emit);
    splitter.finish(emit);
    CHECK(rebuilt == data);
  }
}
