#pragma once

// The one rule for the names of the shm backend's segments under /dev/shm, shared by the workers that create them
// (shm/segment.h) and the agent that removes a job's leftovers at the end of each round (agent/job/job_runner.cpp):
//
//   dtrain@<job id>@node<N>@round<R>@comm<C>@<nonce>           (the job's or the node's communicator)
//   dtrain@<job id>@node<N>@round<R>@group-<name>@<nonce>     (a group of ranks within the node)
//
// '@' cannot occur in a job id ([A-Za-z0-9._-]), so the prefix up to "@node<N>@" names exactly one job's segments on
// one node, never another job's whose id merely starts the same. The nonce (rank 0's, exchanged through the job's
// store) keeps a stale segment from an earlier process with the same job, node, round and index from being joined.

#include <cstdint>
#include <string>

namespace dtrain::worker {

// "dtrain@<job id>@node<N>@": every segment of the job's ranks on node N, whatever the round.
inline std::string shm_job_prefix(const std::string& job_id, std::uint32_t node_rank) {
  return "dtrain@" + job_id + "@node" + std::to_string(node_rank) + "@";
}

// The full name (without the leading '/' of shm_open) of communicator `comm` of round `round`.
inline std::string shm_segment_name(const std::string& job_id, std::uint32_t node_rank, std::uint32_t round,
                                    std::uint32_t comm, const std::string& nonce) {
  return shm_job_prefix(job_id, node_rank) + "round" + std::to_string(round) + "@comm" + std::to_string(comm) + "@" +
         nonce;
}

// The name of a group's communicator (a tensor-, data- or pipeline-parallel group within the node), `group` being
// the group's name in the job ([A-Za-z0-9_-]): "...@round<R>@group-<group>@<nonce>".
inline std::string shm_group_segment_name(const std::string& job_id, std::uint32_t node_rank, std::uint32_t round,
                                          const std::string& group, const std::string& nonce) {
  return shm_job_prefix(job_id, node_rank) + "round" + std::to_string(round) + "@group-" + group + "@" + nonce;
}

}  // namespace dtrain::worker
