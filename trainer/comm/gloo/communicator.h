#pragma once

// The Gloo backend: collectives over TCP between the ranks' processes, CPU only. Rendezvous goes through the job's
// key-value store (see store_adapter.h). Each communicator owns one thread that runs its collectives in issue order
// with gloo's algorithms (allreduce: ring; all_gather, broadcast: gloo's; reduce_scatter: a ring over gloo's
// unbound buffers), so the caller keeps computing while they run. Every collective has the end-to-end deadline
// GlooCommOptions::timeout; after the first failure the communicator is broken and every later collective fails at
// once with that first error (a gloo context cannot be trusted after a failed exchange). send() and recv() (p2p.cpp)
// post their message on the calling thread instead, with unbound buffers of their own slots, and share that
// deadline and that first failure: one that fails breaks the communicator for the collectives too.
//
// Network interface (from_env): GLOO_SOCKET_IFNAME when set (the launcher sets it; like PyTorch, only its first
// comma-separated name is used); else the local address this host uses to reach MASTER_ADDR (the route the kernel
// picks for it); else 127.0.0.1, which only works when every rank is on this host.

#include <chrono>
#include <memory>
#include <string>

#include "worker/store/client.h"
#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

struct GlooCommOptions {
  int rank = 0;  // this process's rank in [0, size)
  int size = 1;  // number of ranks that rendezvous
  // Prefix of the store keys this communicator's rendezvous uses; distinct per communicator of a job round.
  std::string prefix = "dtrain/gloo/0/";
  // Network interface to listen on and connect from (e.g. "eth0"); takes precedence over hostname.
  std::string interface;
  // Address or host name to listen on when no interface is given; empty means 127.0.0.1.
  std::string hostname;
  // Deadline of the rendezvous and of every collective.
  std::chrono::milliseconds timeout{300'000};
};

class GlooCommunicator : public Communicator {
 public:
  // Rendezvous with the other size - 1 ranks through `store`; blocks until every one has published its address or
  // throws CommError after options.timeout. The TCP connections are made after that; gloo bounds each connect by
  // 5 x timeout (it only waits that long for a peer that published its address and then stopped answering).
  GlooCommunicator(std::shared_ptr<store::StoreClient> store, GlooCommOptions options);
  // The job's store from DTRAIN_STORE_ADDR / DTRAIN_JOB_TOKEN, the network as described above, and a store prefix
  // numbered by how many communicators this process created before (every rank creates them in the same order),
  // then `group`: the ranks of several groups created at the same point (the hierarchical backend's cross-node
  // groups, one per local rank) each pass their own group's name.
  static std::unique_ptr<GlooCommunicator> from_env(int rank, int size, const CommOptions& options,
                                                    const std::string& group = "");
  // Runs the collectives already issued (each bounded by the timeout), then leaves the group.
  ~GlooCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "gloo"; }
  // The address this rank listens on, as "host" or "interface", for messages.
  const std::string& endpoint() const;

  std::shared_ptr<Work> allreduce(float* data, std::size_t count) override;
  std::shared_ptr<Work> reduce_scatter(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> all_gather(const float* in, float* out, std::size_t count_per_rank) override;
  std::shared_ptr<Work> broadcast(float* data, std::size_t count, int root) override;
  // gloo's ring allreduce over 16-bit elements with a reduce function that adds in fp32 and rounds back
  // (kernels::add_half): gloo's own float16 sum does the same, and it has no bf16 one.
  std::shared_ptr<Work> allreduce_half(std::uint16_t* data, std::size_t count, kernels::Dtype type) override;
  // gloo's all_gather on 2-byte elements.
  std::shared_ptr<Work> all_gather_half(const std::uint16_t* in, std::uint16_t* out,
                                        std::size_t count_per_rank) override;
  // reduce_scatter()'s ring on 16-bit elements, each step's sum done by kernels::add_half: chunk c's sum starts at
  // rank c + 1 and adds the next rank's input at each step, ((x[c+1] + x[c+2]) + ...) + x[c], rounded every time.
  std::shared_ptr<Work> reduce_scatter_half(const std::uint16_t* in, std::uint16_t* out, std::size_t count_per_rank,
                                            kernels::Dtype type) override;
  // Posted on the calling thread, never queued behind a collective; the n-th send() to a peer matches that peer's
  // n-th recv() from this rank, and the two must agree on the count: gloo checks nothing, so a recv() longer than
  // its send() completes with only the front of its buffer written, and a shorter one aborts the process (an
  // enforce on gloo's event-loop thread). A count of 0 sends nothing. A thread of the Work's own waits for
  // completion, so done() never blocks, and a peer that stopped answering fails wait() after
  // GlooCommOptions::timeout from posting. The Work must be waited for: one destroyed before its message completed
  // gives the message up, which gloo can only do by closing every connection of the context, so the communicator
  // fails every later operation. Throws CommError for a peer that is not another rank of this communicator.
  std::shared_ptr<Work> send(const float* data, std::size_t count, int peer, int stream = 0) override;
  std::shared_ptr<Work> recv(float* data, std::size_t count, int peer, int stream = 0) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::trainer
