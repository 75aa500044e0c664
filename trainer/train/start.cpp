#include "trainer/train/training.h"

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/ckpt/model_file.h"
#include "trainer/common/env.h"
#include "trainer/health/phase.h"
#include "trainer/model/host_mirror.h"
#include "trainer/train/checkpointing.h"
#include "trainer/train/collectives.h"

namespace dtrain::trainer {

// Rank 0 decides where to start and loads it; every rank then gets its step and data step, rank 0's weights and,
// when resumed, its AdamW moments.
Start Training::choose_start() {
  set_phase("start (loading and broadcasting the weights)");
  const int restart_count =
      env_setting("TORCHELASTIC_RESTART_COUNT", 0, 0,
                  "the launcher (dtrain run/launch, torchrun) sets it to the number of restarts so far");
  // A restarted job resumes by itself when it saves checkpoints (or finds some), as if --resume had been given.
  const bool want_resume =
      o_.resume || (restart_count > 0 && (o_.save_every > 0 || !list_checkpoints(o_.checkpoint_dir).empty()));
  StartPoint start;
  std::exception_ptr failure;
  // With --tp every rank starts its own slices of the same whole model (a checkpoint, --init-from's file or --seed's
  // weights), with its slices of the moments when resumed.
  const bool every_rank = groups_.tp != nullptr;
  // 1 resumed, 0 fresh, -1 failed (every rank then stops).
  float status = rank_ == 0 || every_rank ? load_start(want_resume, start, failure) : 0;
  if (every_rank && status < 0) std::rethrow_exception(failure);
  status = broadcast_float(*comm_, status);
  if (status < 0) {
    if (rank_ == 0) std::rethrow_exception(failure);
    throw std::runtime_error("rank 0 could not load the starting weights; see rank 0's log");
  }
  if (status > 0) share_start_point(*comm_, start);
  if (world_ > 1 && !every_rank) comm_->broadcast(model_.params(), model_.buffer_size(), 0)->wait();
  if (status > 0) share_moments(!every_rank);
  // The 16-bit working copy: the ZeRO engine makes it as it shards.
  if (zero_) {
    zero_->shard_params();
  } else {
    model_.refresh_working_params();
  }
  optimizer_steps_ = static_cast<long>(start.precision ? start.precision->adam_steps : start.step);
  if (scaling_ && start.precision) scaling_->restore(*start.precision);
  return {start, status > 0};
}

// Resumed: every rank gets rank 0's AdamW moments (with --zero 1..3, its shards of them); with `broadcast` false
// (--tp: every rank loaded its own) each keeps what it loaded.
void Training::share_moments(bool broadcast) {
  if (!zero_) {
    if (world_ > 1 && broadcast) {
      comm_->broadcast(adamw_->m(), n_, 0)->wait();
      comm_->broadcast(adamw_->v(), n_, 0)->wait();
    }
    return;
  }
  resumed_m_.resize(model_.buffer_size());
  resumed_v_.resize(model_.buffer_size());
  if (world_ > 1 && broadcast) {
    for (std::vector<float>* moments : {&resumed_m_, &resumed_v_}) {
      on_host_floats(*comm_, moments->data(), moments->size(),
                     [&](float* p) { comm_->broadcast(p, moments->size(), 0)->wait(); });
    }
  }
  zero_->load_moments(resumed_m_.data(), resumed_v_.data());
  resumed_m_ = {};
  resumed_v_ = {};
}

// Rank 0: the newest checkpoint when resuming and there is one, else --init-from's weights, else init_weights(--seed).
// Returns choose_start's status: 1 resumed (`start` is the checkpoint's), 0 fresh, -1 failed (`failure` says why).
float Training::load_start(bool want_resume, StartPoint& start, std::exception_ptr& failure) {
  try {
    std::optional<StartPoint> resumed;
    if (want_resume) {
      if (zero_) {
        resumed_m_.resize(model_.buffer_size());
        resumed_v_.resize(model_.buffer_size());
      }
      // AdamW's moments (--zero 0) through host mirrors: on a GPU they are device memory.
      std::optional<HostMirror> m_host, v_host;
      if (!zero_) {
        m_host.emplace(k(), adamw_->m(), n_, HostMirror::Read::no);
        v_host.emplace(k(), adamw_->v(), n_, HostMirror::Read::no);
      }
      float* m = zero_ ? resumed_m_.data() : m_host->data();
      float* v = zero_ ? resumed_v_.data() : v_host->data();
      resumed = load_newest_checkpoint(o_.checkpoint_dir, shape_, model_, m, v, rank_ == 0);
      if (resumed && !zero_) {
        m_host->commit();
        v_host->commit();
      }
    }
    if (resumed) {
      start = *resumed;
      return 1;
    }
    if (!o_.init_from.empty()) {
      std::vector<float> ordered(model_params_);
      read_model_file(o_.init_from, config_, ordered.data(), model_params_);
      HostMirror params(k(), model_.params(), model_.buffer_size());
      model_.layout().take_slices(ordered.data(), params.data());  // this rank's slices (all of it without --tp)
      params.commit();
    } else {
      model_.init_weights(o_.seed);
    }
    return 0;
  } catch (const std::exception&) {
    failure = std::current_exception();
    return -1;
  }
}

}  // namespace dtrain::trainer
