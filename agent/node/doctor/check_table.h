#pragma once

// A doctor check as data: one row of a table, and one driver (run_checks) that turns a table and the facts its rows
// read into the Checks a report lists, in the table's order. Adding a check means adding a row.
//
// A row's contract:
//   id         the stable, dotted id the report shows ("gpu.ecc"). A row yields at most one Check, with this id.
//   skip       why the check does not apply to these facts, or nullopt when it does. When it says why, the Check is
//              a skip with that reason and no fix, and evaluate is not called. Empty: the check always applies.
//   evaluate   what the check finds: pass, warn or fail with a one-line message; a skip where whether the check
//              applies shows only in the facts it evaluates (one GPU: its NVLinks have no peer); or nullopt when the
//              row has nothing to report at all (lint rows report only what they find).
//   warn_fix, fail_fix
//              the one-line fix a warn or a fail shows. A Finding's own fix replaces it: a fix that names a fact (a
//              driver version, a variable's value), or a second way to fail with its own remedy. A pass or a skip
//              never shows a fix.
// Every row is a pure function of its facts, so tests feed fake facts and the agent and the CLI get the same verdicts.
//
// A row's scope is its table, and the table's Facts type is all its rows may read:
//   gpu_checks      this node's GPUs, through NVML                                     (DoctorInputs)
//   system_checks   the rest of this node: NCCL, RDMA NICs, limits, /dev/shm, disks    (DoctorInputs)
//   lint_env        the environment jobs inherit                                      (the variables, the interfaces)
//   cluster_checks  the nodes of a job together, from their answers to the probe      (NodeFindings, ClusterOptions)

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/node/doctor/checks.h"

namespace dtrain::node::doctor {

// What a row found.
struct Finding {
  Status status = Status::pass;
  std::string message;  // one line: what was found
  std::string fix{};    // "" = the row's fix for this status
};

template <typename Facts>
struct CheckRow {
  std::string id;
  std::function<std::optional<std::string>(const Facts&)> skip;  // why the check does not apply; empty: it always does
  std::function<std::optional<Finding>(const Facts&)> evaluate;
  std::string warn_fix;
  std::string fail_fix;
};

// The Checks of a table's rows, in order.
template <typename Facts>
std::vector<Check> run_checks(const std::vector<CheckRow<Facts>>& rows, const Facts& facts) {
  std::vector<Check> out;
  for (const auto& row : rows) {
    if (std::optional<std::string> why = row.skip ? row.skip(facts) : std::nullopt) {
      out.push_back({row.id, Status::skip, std::move(*why), ""});
      continue;
    }
    std::optional<Finding> found = row.evaluate(facts);
    if (!found) continue;
    std::string fix;
    if (found->status == Status::warn || found->status == Status::fail) {
      fix = !found->fix.empty() ? found->fix : found->status == Status::warn ? row.warn_fix : row.fail_fix;
    }
    out.push_back({row.id, found->status, std::move(found->message), std::move(fix)});
  }
  return out;
}

// "a, b, c": the lists inside messages.
inline std::string join_list(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

}  // namespace dtrain::node::doctor
