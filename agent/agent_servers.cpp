// The agent's ports (Agent::run's first steps): its gRPC servers, the private session socket of an agent that a
// launcher started, and the credentials they serve and dial with, from the cluster secret or plaintext as
// common/transport.h decides.

#include <cstdio>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/agent_servers.h"
#include "agent/node/probe/probe.h"
#include "agent/security/credentials.h"
#include "common/grpc/grpc_options.h"
#include "common/transport.h"
#include "common/address.h"

namespace dtrain::agent {

int Agent::start_servers(Servers& servers, const Credentials& credentials) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen, credentials.port, &port);
  // With a session socket, no session can come in over TCP at all: the service is not there.
  if (options_.session_socket.empty()) builder.RegisterService(&servers.session_service);
  builder.RegisterService(&servers.store_service);
  builder.RegisterService(&servers.report_service);
  set_session_server_options(builder);
  servers.server = builder.BuildAndStart();
  if (!servers.server || port == 0) {
    std::fprintf(stderr, "dtrain agent: cannot listen on %s (address in use or not on this host?)\n",
                 options_.listen.c_str());
    return 1;
  }
  const std::string host = advertised_host();
  address_ = host + ":" + std::to_string(port);
  // A session socket means a launcher started this agent for its job: workers come right away.
  // The health socket first: its path is in every worker's environment, which the runner gets at its construction.
  JobRunnerHooks hooks;
  hooks.worker_env = worker_tls_ ? worker_tls_->env() : std::map<std::string, std::string>{};
  servers.health_socket = start_health_socket(hooks);
  hooks.console = options_.console;
  runner_ = std::make_unique<JobRunner>(store_, host, address_, std::move(hooks), !options_.session_socket.empty());
  // The servers and the socket already take reports: from now on they find the runner to judge them by.
  reporting_runner_.store(runner_.get(), std::memory_order_release);
  return options_.session_socket.empty() ? 0 : start_session_socket(servers);
}

std::string Agent::advertised_host() const {
  std::string host = options_.advertise_host.empty() ? host_of(options_.listen) : options_.advertise_host;
  if (host == "0.0.0.0" || host.empty()) {
    // Advertise the address this node uses to reach its launcher, else its first address.
    host = options_.join.empty() ? "" : node::source_address_towards(host_of(options_.join));
    if (host.empty()) host = facts_.addresses.empty() ? "127.0.0.1" : facts_.addresses.front();
  }
  return host;
}

int Agent::start_session_socket(Servers& servers) {
  // Sessions on the private socket go to a server of their own, which has no listening port.
  options_.one_shot = true;
  grpc::ServerBuilder session_builder;
  session_builder.RegisterService(&servers.session_service);
  set_session_server_options(session_builder);
  servers.session_server = session_builder.BuildAndStart();
  try {
    if (!servers.session_server) throw std::runtime_error("cannot start the session server");
    servers.session_socket = std::make_unique<SessionSocket>(options_.session_socket, *servers.session_server);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain agent: %s\n", e.what());
    servers.server->Shutdown(std::chrono::system_clock::now());
    if (servers.session_server) servers.session_server->Shutdown(std::chrono::system_clock::now());
    return 1;
  }
  return 0;
}

const Agent::ClusterIdentity& Agent::cluster_identity() {
  if (cluster_) return *cluster_;
  const std::string dir = options_.secret_dir.empty() ? security::default_secret_dir() : options_.secret_dir;
  security::ClusterSecret secret;
  try {
    secret = security::load_secret(dir);
  } catch (const security::SecurityError& e) {
    throw security::SecurityError(std::string(e.what()) + ". Every session needs the cluster token, on loopback too; "
                                  "--insecure accepts anyone who reaches the port instead");
  }
  auto identity = security::issue_identity(secret, facts_.hostname);
  return cluster_.emplace(ClusterIdentity{std::move(secret), std::move(identity)});
}

void Agent::make_port_credentials(Credentials& credentials) {
  const bool sessions_on_socket = !options_.session_socket.empty();
  if (agent_port_transport(options_.listen, sessions_on_socket, options_.insecure) == Transport::plaintext) {
    // A local agent's port serves the store and health reports alone (each checks the round's token); its sessions
    // come over the private socket. Otherwise plaintext is --insecure's doing, and loopback is no exception: every
    // user and container on this host can reach it.
    if (!sessions_on_socket && options_.insecure) {
      spdlog::warn("--insecure: sessions in plaintext without the cluster token on {}{}: anyone who reaches this "
                   "port can run commands as this user", options_.listen,
                   is_loopback_host(host_of(options_.listen)) ? " (on loopback: every user of this host)" : "");
    }
    credentials.port = grpc::InsecureServerCredentials();
    return;
  }
  // Mutual TLS with a certificate derived from the cluster CA, plus the cluster token, checked before any handler;
  // on loopback too. Worker certificates of the current job pass for the store and reports only.
  const ClusterIdentity& cluster = cluster_identity();
  worker_tls_.emplace(runtime_dir_->make_subdir("tls"), cluster.secret);
  credentials.port = security::server_credentials(cluster.secret, cluster.identity, admission_);
}

void Agent::make_join_credentials(Credentials& credentials) {
  if (session_transport(options_.join, options_.insecure) == Transport::plaintext) {
    credentials.join = grpc::InsecureChannelCredentials();
    return;
  }
  const ClusterIdentity& cluster = cluster_identity();
  credentials.join = security::channel_credentials(cluster.secret, cluster.identity);
}

}  // namespace dtrain::agent
