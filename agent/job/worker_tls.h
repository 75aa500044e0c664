#pragma once

// The files a TLS cluster's workers use to reach this agent's store and report server over the same mutual TLS:
// the cluster CA and a worker certificate of their own, issued per job (security::issue_worker_identity), so that
// a job's workers open nothing once the job is over. They live in a directory only this user can read, removed
// when this object goes. The cluster token is never given to workers.

#include <map>
#include <string>

#include "agent/security/secret.h"

namespace dtrain::agent {

class WorkerTls {
 public:
  // Writes the cluster CA into `dir` (which exists and is private to this user). Throws std::runtime_error when it
  // cannot.
  WorkerTls(std::string dir, security::ClusterSecret secret);
  ~WorkerTls();
  WorkerTls(const WorkerTls&) = delete;
  WorkerTls& operator=(const WorkerTls&) = delete;

  // DTRAIN_TLS_CA, DTRAIN_TLS_CERT and DTRAIN_TLS_KEY for every worker: the paths of the files, fixed for the
  // agent's life.
  const std::map<std::string, std::string>& env() const { return env_; }

  // Replaces the worker certificate with one for `job_id` on `host`, through temporary files renamed over the old
  // ones, so a worker of the previous job never reads half a key. Throws std::runtime_error naming the file.
  void issue_for_job(const std::string& job_id, const std::string& host);

 private:
  std::string dir_;
  security::ClusterSecret secret_;
  std::map<std::string, std::string> env_;
};

}  // namespace dtrain::agent
