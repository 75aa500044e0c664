#include "worker/store/client.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>

#include "common/grpc/metadata.h"
#include "dtrain/v1/store.grpc.pb.h"
#include "worker/credentials.h"
#include "worker/store/limits.h"

namespace dtrain::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string quoted(std::string_view text) {
  constexpr std::size_t limit = 80;
  std::string out = "'";
  out.append(text.substr(0, limit));
  if (text.size() > limit) out += "...";
  return out + "'";
}

std::string ms_text(milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// One call's description, for its error message: "get 'nccl/default'", "wait for 3 keys".
struct Call {
  std::string operation;
  std::string subject;
  milliseconds timeout{0};  // of a blocking call; 0 for the others

  std::string name() const { return "store " + operation + (subject.empty() ? "" : " " + subject); }
};

}  // namespace

struct StoreClient::Impl {
  std::string address;
  std::string token;
  StoreClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Store::Stub> stub;

  milliseconds blocking_timeout(const std::string& operation, milliseconds timeout) const {
    if (timeout.count() == 0) timeout = options.default_timeout;
    if (timeout.count() < 0 || timeout > kMaxTimeout) {
      throw StoreError(StoreError::Kind::invalid_argument,
                       "store " + operation + ": timeout of " + ms_text(timeout) + " is outside 1 ms .. " +
                           ms_text(kMaxTimeout) + " (1 hour), the store's limit");
    }
    return timeout;
  }

  std::string reach_hint() const {
    return "check that node 0's agent is running and that " + address +
           " (DTRAIN_STORE_ADDR) is reachable from this host";
  }

  // Runs one RPC with the token and a deadline: the operation's timeout (if it blocks) plus connect_timeout, so
  // that the server's own timeout error, which says what is missing, normally arrives first.
  template <class Rpc>
  void run(const Call& call, Rpc rpc) const {
    grpc::ClientContext context;
    context.AddMetadata(std::string(kTokenMetadata), token);
    context.set_wait_for_ready(true);
    milliseconds budget = call.timeout + options.connect_timeout;
    Clock::time_point start = Clock::now();
    context.set_deadline(std::chrono::system_clock::now() + budget);
    grpc::Status status = rpc(&context);
    if (!status.ok()) throw error(call, status, Clock::now() - start >= budget);
  }

  StoreError error(const Call& call, const grpc::Status& status, bool no_answer) const {
    const std::string& detail = status.error_message();
    using Kind = StoreError::Kind;
    switch (status.error_code()) {
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        if (no_answer || call.timeout.count() == 0) {
          return {Kind::timeout, call.name() + " got no answer from the store at " + address + " within " +
                                     ms_text(call.timeout + options.connect_timeout) + "; " + reach_hint()};
        }
        if (call.operation == "get") {
          return {Kind::timeout, call.name() + " timed out after " + ms_text(call.timeout) + " at " + address +
                                     ": no process set it; check that the rank that sets it (often rank 0) is "
                                     "running and uses the same key"};
        }
        return {Kind::timeout, call.name() + " timed out after " + ms_text(call.timeout) + " at " + address + ": " +
                                   detail + "; check that the ranks that set them are running and use the same keys"};
      case grpc::StatusCode::UNAUTHENTICATED:
        return {Kind::unauthenticated,
                call.name() + " was refused by the store at " + address + ": " + detail +
                    "; check that DTRAIN_JOB_TOKEN is this round's token (the launcher sets it for each worker)"};
      case grpc::StatusCode::INVALID_ARGUMENT:
        return {Kind::invalid_argument, call.name() + " was refused by the store at " + address + ": " + detail};
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return {Kind::full, call.name() + " was refused by the store at " + address + ": " + detail};
      case grpc::StatusCode::FAILED_PRECONDITION:
        return {Kind::not_an_integer, call.name() + " failed at " + address + ": " + detail};
      case grpc::StatusCode::ABORTED:
        return {Kind::closed, call.name() + " failed at " + address + ": " + detail +
                                  "; this worker belongs to a round that is over (a restart starts new workers)"};
      case grpc::StatusCode::UNAVAILABLE:
        return {Kind::unreachable,
                call.name() + " cannot reach the store at " + address + " (" + detail + "); " + reach_hint()};
      default:
        return {Kind::other, call.name() + " failed at " + address + ": gRPC status " +
                                 std::to_string(static_cast<int>(status.error_code())) + ": " + detail};
    }
  }

  void check_value(const Call& call, std::size_t size) const {
    if (size > kMaxValueBytes) {
      throw StoreError(StoreError::Kind::invalid_argument,
                       call.name() + ": the value is " + std::to_string(size) + " bytes; no store takes more than " +
                           std::to_string(kMaxValueBytes) + " bytes (64 MiB) in one value (an agent's store: 16 "
                           "MiB); keep large data out of the store (a shared file, with its path in the store)");
    }
  }
};

StoreClient::StoreClient(std::string address, std::string token, StoreClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = std::move(address);
  impl_->token = std::move(token);
  impl_->options = options;
  if (impl_->address.empty()) {
    throw StoreError(StoreError::Kind::unreachable, "store client: the store address is empty (host:port expected)");
  }
  if (impl_->token.size() > kMaxTokenBytes) {
    throw StoreError(StoreError::Kind::unauthenticated,
                     "store client: the token is " + std::to_string(impl_->token.size()) + " bytes, more than the " +
                         std::to_string(kMaxTokenBytes) + " a token may have (it travels as gRPC metadata; the "
                         "launcher's tokens are 64 characters); check that DTRAIN_JOB_TOKEN holds the token the "
                         "launcher set for this worker");
  }
  for (char c : impl_->token) {
    if (c < 0x20 || c > 0x7e) {
      throw StoreError(StoreError::Kind::unauthenticated,
                       "store client: the token holds a character that gRPC metadata cannot carry "
                       "(printable ASCII only); check DTRAIN_JOB_TOKEN");
    }
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
  arguments.SetMaxSendMessageSize(kMaxMessageBytes);
  // A get may block for up to an hour; pings notice a dead store (or a dropped link) well before that.
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  // The worker's certificate when the cluster uses TLS (worker/credentials.h), else plaintext.
  const auto credentials = worker::credentials_from_env(arguments);
  if (!credentials.ok()) throw StoreError(StoreError::Kind::other, "store client: " + credentials.status.message());
  impl_->channel = grpc::CreateCustomChannel(impl_->address, credentials.value, arguments);
  impl_->stub = v1::Store::NewStub(impl_->channel);
  if (!impl_->channel->WaitForConnected(std::chrono::system_clock::now() + options.connect_timeout)) {
    throw StoreError(StoreError::Kind::unreachable, "store client: cannot reach the store at " + impl_->address +
                                                        " within " + ms_text(options.connect_timeout) + "; " +
                                                        impl_->reach_hint());
  }
}

StoreClient StoreClient::from_env(StoreClientOptions options) {
  const char* address = std::getenv("DTRAIN_STORE_ADDR");
  const char* token = std::getenv("DTRAIN_JOB_TOKEN");
  for (auto [name, value] : {std::pair{"DTRAIN_STORE_ADDR", address}, std::pair{"DTRAIN_JOB_TOKEN", token}}) {
    if (value == nullptr || *value == '\0') {
      throw StoreError(StoreError::Kind::other,
                       std::string("store client: ") + name +
                           " is not set; run this program under `dtrain launch` or `dtrain run`, which set "
                           "DTRAIN_STORE_ADDR (host:port of the job's store) and DTRAIN_JOB_TOKEN for every worker");
    }
  }
  return StoreClient(address, token, options);
}

StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;
StoreClient::~StoreClient() = default;

const std::string& StoreClient::address() const { return impl_->address; }

void StoreClient::set(std::string_view key, std::string_view value) {
  Call call{"set", quoted(key)};
  impl_->check_value(call, value.size());
  v1::SetRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  v1::SetResponse response;
  impl_->run(call, [&](grpc::ClientContext* context) { return impl_->stub->Set(context, request, &response); });
}

std::string StoreClient::get(std::string_view key, milliseconds timeout) {
  timeout = impl_->blocking_timeout("get", timeout);
  Call call{"get", quoted(key), timeout};
  v1::GetRequest request;
  request.set_key(std::string(key));
  request.set_timeout_ms(static_cast<std::uint32_t>(timeout.count()));
  v1::GetResponse response;
  impl_->run(call, [&](grpc::ClientContext* context) { return impl_->stub->Get(context, request, &response); });
  return std::move(*response.mutable_value());
}

std::int64_t StoreClient::add(std::string_view key, std::int64_t delta) {
  Call call{"add", quoted(key)};
  v1::AddRequest request;
  request.set_key(std::string(key));
  request.set_delta(delta);
  v1::AddResponse response;
  impl_->run(call, [&](grpc::ClientContext* context) { return impl_->stub->Add(context, request, &response); });
  return response.value();
}

std::string StoreClient::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  Call call{"compare_set", quoted(key)};
  impl_->check_value(call, expected.size());
  impl_->check_value(call, desired.size());
  v1::CompareSetRequest request;
  request.set_key(std::string(key));
  request.set_expected(std::string(expected));
  request.set_desired(std::string(desired));
  v1::CompareSetResponse response;
  impl_->run(call,
             [&](grpc::ClientContext* context) { return impl_->stub->CompareSet(context, request, &response); });
  return std::move(*response.mutable_value());
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  Call call{"check", keys.size() == 1 ? quoted(keys.front()) : "of " + std::to_string(keys.size()) + " keys"};
  v1::CheckRequest request;
  for (const auto& key : keys) request.add_keys(key);
  v1::CheckResponse response;
  impl_->run(call, [&](grpc::ClientContext* context) { return impl_->stub->Check(context, request, &response); });
  return response.all_present();
}

bool StoreClient::delete_key(std::string_view key) {
  Call call{"delete_key", quoted(key)};
  v1::DeleteRequest request;
  request.set_key(std::string(key));
  v1::DeleteResponse response;
  impl_->run(call, [&](grpc::ClientContext* context) { return impl_->stub->Delete(context, request, &response); });
  return response.deleted();
}

std::int64_t StoreClient::num_keys() {
  Call call{"num_keys", ""};
  v1::NumKeysRequest request;
  v1::NumKeysResponse response;
  impl_->run(call, [&](grpc::ClientContext* context) { return impl_->stub->NumKeys(context, request, &response); });
  return response.count();
}

void StoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  timeout = impl_->blocking_timeout("wait", timeout);
  Call call{"wait", keys.size() == 1 ? "for " + quoted(keys.front()) : "for " + std::to_string(keys.size()) + " keys",
            timeout};
  v1::WaitRequest request;
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(static_cast<std::uint32_t>(timeout.count()));
  v1::WaitResponse response;
  impl_->run(call, [&](grpc::ClientContext* context) { return impl_->stub->Wait(context, request, &response); });
}

}  // namespace dtrain::store
