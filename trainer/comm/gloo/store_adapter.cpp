#include "trainer/comm/gloo/store_adapter.h"

#include <algorithm>
#include <utility>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {
namespace {

// Runs a store call; a StoreError becomes a CommError that says the rendezvous is what failed.
template <class Call>
auto rendezvous_call(Call call) {
  try {
    return call();
  } catch (const store::StoreError& error) {
    std::string hint = error.kind() == store::StoreError::Kind::timeout
                           ? " (not every rank reached the rendezvous in time: check that all WORLD_SIZE workers "
                             "started and create their communicators in the same order)"
                           : "";
    throw CommError(std::string("gloo rendezvous through the job store failed: ") + error.what() + hint);
  }
}

}  // namespace

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<store::StoreClient> client, std::string prefix,
                                   std::chrono::milliseconds timeout)
    : client_(std::move(client)), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  rendezvous_call([&] {
    client_->set(prefix_ + key, std::string_view(data.data(), data.size()));
    return 0;
  });
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  std::string value = rendezvous_call([&] { return client_->get(prefix_ + key, timeout_); });
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& key : keys) prefixed.push_back(prefix_ + key);
  // gloo passes its context timeout; ours bounds it too so no wait outlives CommOptions::timeout.
  const auto deadline = timeout.count() > 0 ? std::min(timeout, timeout_) : timeout_;
  rendezvous_call([&] {
    client_->wait(prefixed, deadline);
    return 0;
  });
}

}  // namespace dtrain::trainer
