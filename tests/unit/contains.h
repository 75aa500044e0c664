#pragma once
// Test support: whether `part` occurs in `text`.

#include <string_view>

inline bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }
