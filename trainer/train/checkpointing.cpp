#include "trainer/train/checkpointing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "trainer/ckpt/checkpoint_dir.h"
#include "trainer/ckpt/model_file.h"
#include "trainer/model/host_mirror.h"
#include "trainer/train/collectives.h"

namespace dtrain::trainer {
namespace {

bool same_shape(const GptConfig& a, const GptConfig& b) {
  return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size &&
         a.padded_vocab_size == b.padded_vocab_size && a.num_layers == b.num_layers &&
         a.num_heads == b.num_heads && a.channels == b.channels;
}

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

std::string pair_name(const CheckpointPair& pair) { return file_name(pair.model) + " + " + file_name(pair.state); }

// Resume findings go to stderr: they decide what the run continues from, and the launcher's failure summary shows
// a worker's last stderr lines.
void say(const std::string& line) {
  std::fprintf(stderr, "dtrain-trainer: %s\n", line.c_str());
  std::fflush(stderr);
}

// The state file stores the moments without padding; with none (--zero 0) they are written as they are.
void write_moments(const std::string& path, const TrainState& state, const ParamLayout& layout, const float* m,
                   const float* v) {
  if (layout.buffer_size() == layout.num_params()) {
    write_state_file(path, state, m, v);
    return;
  }
  std::vector<float> packed_m(layout.num_params()), packed_v(layout.num_params());
  layout.pack(m, packed_m.data());
  layout.pack(v, packed_v.data());
  write_state_file(path, state, packed_m.data(), packed_v.data());
}

// A checksum that matches but a step count past the step is a file no trainer writes: refused like damage.
void check_precision(const std::string& path, const TrainState& state) {
  if (state.precision && state.precision->adam_steps > state.step) {
    throw CheckpointError("state file " + path + ": AdamW step count " + std::to_string(state.precision->adam_steps) +
                          " is past the step " + std::to_string(state.step) + "; the file is damaged");
  }
}

void say_precision(const TrainState& state, kernels::Dtype precision) {
  if (state.precision) {
    say("AdamW has taken " + std::to_string(state.precision->adam_steps) + " of the " + std::to_string(state.step) +
        " steps; loss scale " + std::to_string(state.precision->loss_scale) + ", " +
        std::to_string(state.precision->growth_tracker) + " finite steps since it last changed");
  } else if (precision == kernels::Dtype::fp16) {
    say("the checkpoint has no loss scale (a bf16 or fp32 run wrote it): the loss scaler starts at "
        "--loss-scale-init");
  }
}

// Why a checkpoint with this header cannot continue this run (another model shape or global batch); "" when it can.
std::string run_mismatch(const std::string& path, const TrainState& found, const TrainState& shape) {
  if (!same_shape(found.config, shape.config)) {
    return "checkpoint " + path + " is of a model " + describe_header(found.config) + ", this run builds " +
           describe_header(shape.config) + "; resume with the same model flags or use another --checkpoint-dir";
  }
  if (global_batch_tokens(found) != global_batch_tokens(shape)) {
    return "checkpoint " + path + " was written by a run with a global batch of " +
           std::to_string(global_batch_tokens(found)) + " tokens (batch " + std::to_string(found.batch_size) +
           " x seq " + std::to_string(found.seq_len) + " x world " + std::to_string(found.world_size) + " x accum " +
           std::to_string(found.grad_accum) + "), this run has " + std::to_string(global_batch_tokens(shape)) +
           "; pick --batch-size/--grad-accum so that the product matches, or use another --checkpoint-dir";
  }
  return "";
}

}  // namespace

void share_start_point(Communicator& comm, StartPoint& start) {
  start.step = broadcast_u64(comm, start.step);
  start.data_step = broadcast_u64(comm, start.data_step);
  const bool has_precision = broadcast_u64(comm, start.precision ? 1 : 0) != 0;
  if (!has_precision) return;
  PrecisionState p = start.precision.value_or(PrecisionState{});
  p.adam_steps = broadcast_u64(comm, p.adam_steps);
  p.loss_scale = broadcast_float(comm, p.loss_scale);
  p.growth_tracker = static_cast<int>(broadcast_u64(comm, static_cast<std::uint64_t>(p.growth_tracker)));
  start.precision = p;
}

TrainState run_shape(const TrainOptions& o, const GptConfig& config, int seq_len, int world, std::size_t n) {
  TrainState state;
  state.seed = o.seed;
  state.config = config;
  state.batch_size = o.batch_size;
  state.seq_len = seq_len;
  state.world_size = world;
  state.grad_accum = o.grad_accum;
  state.num_params = n;
  return state;
}

std::uint64_t global_batch_tokens(const TrainState& s) {
  return static_cast<std::uint64_t>(s.batch_size) * s.seq_len * s.world_size * s.grad_accum;
}

std::optional<StartPoint> load_newest_checkpoint(const std::string& dir, const TrainState& shape, Gpt& model,
                                                 float* m_out, float* v_out, bool tidy) {
  const ParamLayout whole(model.config());  // what the files hold, whatever slices this rank keeps
  const std::size_t n = whole.num_params();
  if (tidy) {
    for (const std::string& line : remove_interrupted_saves(dir)) say(line);
  }
  std::vector<CheckpointPair> pairs = list_checkpoints(dir);
  if (pairs.empty()) {
    say("no complete checkpoint in " + dir + ": starting from step 1");
    return std::nullopt;
  }
  std::vector<std::string> damaged;
  for (const CheckpointPair& pair : pairs) {
    try {
      TrainState found = read_state_header(pair.state);
      if (std::string why = run_mismatch(pair.state, found, shape); !why.empty()) {
        // Only a file whose checksum holds is another run's: a flipped bit in a shape field is damage, skipped for
        // the pair before it like any other.
        read_verified_state_header(pair.state);
        throw std::invalid_argument(why);
      }
      // Into scratch buffers first: a pair that fails half-way must leave the model and optimizer untouched.
      std::vector<float> ordered(n), m(n), v(n);
      bool model_checked = false;
      TrainState state =
          read_checkpoint_pair(pair, shape.config, ordered.data(), m.data(), v.data(), n, model_checked);
      check_precision(pair.state, state);
      HostMirror params(model.backend(), model.params(), model.buffer_size());
      model.layout().take_slices(ordered.data(), params.data());  // this rank's slices (all of it without --tp)
      params.commit();
      if (!model.layout().whole()) {
        // The moments are stored in the whole model's unpadded layout: this rank's slices of them.
        for (auto [stored, out] : {std::pair{&m, m_out}, std::pair{&v, v_out}}) {
          whole.to_checkpoint_order(stored->data(), ordered.data());
          model.layout().take_slices(ordered.data(), out);
        }
      } else {
        model.layout().unpack(m.data(), m_out);
        model.layout().unpack(v.data(), v_out);
      }
      if (found.world_size != shape.world_size || found.batch_size != shape.batch_size ||
          found.grad_accum != shape.grad_accum) {
        spdlog::warn("checkpoint {} was written with batch {} x world {} x accum {}; this run splits the same "
                     "global batch as {} x {} x {} (same data, losses equal up to float rounding)",
                     pair.state, found.batch_size, found.world_size, found.grad_accum, shape.batch_size,
                     shape.world_size, shape.grad_accum);
      }
      say("resuming from step " + std::to_string(state.step) + ": " + pair_name(pair) +
          (model_checked ? ", checksums ok"
                         : ", state checksum ok; the model file has no recorded checksum (its state file predates "
                           "them), so it is not verified"));
      say_precision(state, model.precision());
      return StartPoint{state.step, state.data_step, pair.model, state.precision};
    } catch (const CheckpointError& e) {
      say(pair_name(pair) + ": " + e.what() + ": skipped");
      damaged.push_back(file_name(pair.state));
    }
  }
  std::string names;
  for (const std::string& name : damaged) names += (names.empty() ? "" : ", ") + name;
  throw CheckpointError("every checkpoint in " + dir + " is damaged (" + names +
                        ", see above); not starting from step 1, which would discard the run. Restore the files "
                        "from a copy, or move them away (or pass another --checkpoint-dir) to start over");
}

void save_checkpoint(Communicator& comm, const std::string& dir, const Gpt& model, const float* m, const float* v,
                     const TrainState& state) {
  write_checkpoint(comm, dir, model.config(), model.layout(), m, v, state, [&model] {
    std::vector<float> ordered(model.num_params());
    const HostMirror params(model.backend(), model.params(), model.buffer_size());
    model.layout().to_checkpoint_order(params.data(), ordered.data());
    return ordered;
  });
}

void write_checkpoint(Communicator& comm, const std::string& dir, const GptConfig& config, const ParamLayout& layout,
                      const float* m, const float* v, const TrainState& state,
                      const std::function<std::vector<float>()>& ordered_params) {
  float failed = 0;
  std::string failure;
  CheckpointPair pair = checkpoint_pair(dir, state.step);
  if (comm.rank() == 0) {
    try {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) throw CheckpointError("cannot create --checkpoint-dir " + dir + " (" + ec.message() + ")");
      const std::vector<float> ordered = ordered_params();
      TrainState recorded = state;
      recorded.model_crc = write_model_file(pair.model, config, ordered.data(), ordered.size());
      try {
        write_moments(pair.state, recorded, layout, m, v);
      } catch (const CheckpointError& e) {
        // The new model file would pair with nothing, or with an older state file of this step that no longer
        // matches it; it also holds space that the next try needs.
        std::filesystem::remove(pair.model, ec);
        std::filesystem::remove(pair.state, ec);
        throw CheckpointError(std::string(e.what()) + "; removed " + file_name(pair.model) +
                              " so that no half-written checkpoint is left");
      }
    } catch (const std::exception& e) {
      failure = e.what();
      failed = 1;
    }
  }
  if (allreduce_sum(comm, failed) != 0) {
    throw CheckpointError(comm.rank() == 0 ? failure
                                           : "rank 0 could not write the checkpoint of step " +
                                                 std::to_string(state.step) + "; see rank 0's log");
  }
  spdlog::info("saved checkpoint {} (+ {})", pair.model, pair.state);
}

}  // namespace dtrain::trainer

namespace dtrain::trainer {

void save_zero_checkpoint(Communicator& comm, const std::string& dir, const Gpt& model, ZeroEngine& zero,
                          const TrainState& state) {
  std::vector<float> m, v;
  zero.gather_moments(m, v);
  zero.gather_params();
  try {
    save_checkpoint(comm, dir, model, m.data(), v.data(), state);
  } catch (...) {
    zero.release_params();
    throw;
  }
  zero.release_params();
}

}  // namespace dtrain::trainer

namespace dtrain::trainer {

void save_tensor_parallel_checkpoint(Communicator& comm, Communicator& tp, Communicator& pp, const std::string& dir,
                                     const Gpt& model, const float* m, const float* v, const TrainState& state) {
  const ParamLayout whole(model.config());
  const ParamLayout& mine = model.layout();
  // The whole model's values in checkpoint order on every rank of the groups: each rank puts its slices of the split
  // tensors (and TP rank 0 the replicated ones; the tied copy of wte none) into zeros, and the groups sum them.
  auto gather = [&](const float* ours, const char* what) {
    std::vector<float> all(whole.num_params());
    mine.put_slices(ours, all.data());
    for (const TensorInfo& t : mine.checkpoint_tensors())
      if ((t.replicated && tp.rank() != 0) || t.tied_copy)
        for (const SlicePiece& piece : t.pieces)  // this rank's part of the whole tensor (a slice, with --tp)
          std::fill_n(all.begin() + static_cast<std::ptrdiff_t>(t.full_at + piece.full), piece.count, 0.0f);
    for (Communicator* group : {&tp, &pp}) {
      if (group->size() == 1) continue;
      on_host_floats(*group, all.data(), all.size(),
                     [&](float* p) { wait_collective(*group->allreduce(p, all.size()), what); });
    }
    return all;
  };
  const HostMirror params(model.backend(), model.params(), model.buffer_size());
  std::vector<float> ordered = gather(params.data(), "allreduce (the checkpoint's parameters)");
  // The moments in the whole model's buffer layout, as the state file stores them.
  std::vector<float> whole_m(whole.buffer_size()), whole_v(whole.buffer_size());
  whole.from_checkpoint_order(gather(m, "allreduce (the checkpoint's first moments)").data(), whole_m.data());
  whole.from_checkpoint_order(gather(v, "allreduce (the checkpoint's second moments)").data(), whole_v.data());
  write_checkpoint(comm, dir, model.config(), whole, whole_m.data(), whole_v.data(), state,
                   [&ordered] { return std::move(ordered); });
}

}  // namespace dtrain::trainer
