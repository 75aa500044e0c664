#pragma once

// gloo's rendezvous Store over the job's key-value store (dtrain::store::StoreClient). Every key is put under a
// prefix, so several communicators (and anything else using the store) coexist in one job round. gloo's get and
// wait block until the keys exist; here they give up after `timeout` and throw CommError.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "worker/store/client.h"

namespace dtrain::trainer {

class GlooStoreAdapter : public ::gloo::rendezvous::Store {
 public:
  // prefix: e.g. "gloo/0/", prepended to every key gloo uses. timeout: deadline of get and wait.
  GlooStoreAdapter(std::shared_ptr<store::StoreClient> client, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<store::StoreClient> client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace dtrain::trainer
