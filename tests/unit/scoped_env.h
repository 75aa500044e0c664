#pragma once
// Test support: sets (or with nullptr unsets) environment variables for one test and restores them after.

#include <stdlib.h>

#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

class ScopedEnv {
 public:
  explicit ScopedEnv(std::initializer_list<std::pair<std::string, const char*>> values) {
    for (const auto& [name, value] : values) {
      const char* old = getenv(name.c_str());
      saved_.emplace_back(name, old != nullptr, old != nullptr ? old : "");
      if (value != nullptr) {
        setenv(name.c_str(), value, 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  ~ScopedEnv() {
    for (auto& [name, had, value] : saved_) {
      if (had) {
        setenv(name.c_str(), value.c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::tuple<std::string, bool, std::string>> saved_;
};
