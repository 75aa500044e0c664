// Putting a read overlay into a job: the checks that need the job (which workers the bootstrap reaches), and the
// environment that carries the overlay to every worker (DTRAIN_TUNE for the bootstrap, the env knobs as they are).

#include <charconv>
#include <filesystem>

#include "agent/job/python_command.h"
#include "cli/tune/overlay.h"

namespace dtrain::tune {
namespace {

constexpr std::size_t kMaxFileNameInJson = 200;

// `text` as a JSON string, quotes included; control characters and non-ASCII bytes as \u00XX (the bootstrap only
// prints it, and a lone byte of a cut UTF-8 sequence stays valid JSON).
std::string json_string(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte >= 0x7f) {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc() ? std::string(buffer, end) : "0";
}

// Appends "name":value to an object's members when `value` is set.
template <class T>
void member(std::string& members, std::string_view name, const std::optional<T>& value) {
  if (!value) return;
  if (!members.empty()) members += ',';
  members += json_string(name) + ':';
  if constexpr (std::is_same_v<T, bool>) {
    members += *value ? "true" : "false";
  } else {
    members += json_number(static_cast<double>(*value));
  }
}

void object(std::string& out, std::string_view name, const std::string& members) {
  if (!members.empty()) out += ',' + json_string(name) + ":{" + members + '}';
}

[[noreturn]] void refuse(const Overlay& overlay, std::string message, std::string hint) {
  spec::Diagnostic d;
  d.file = overlay.file;
  d.message = std::move(message);
  d.hint = std::move(hint);
  throw spec::SpecError({std::move(d)});
}

}  // namespace

bool has_python_knobs(const Overlay& o) {
  const auto& d = o.dataloader;
  return d.num_workers || d.pin_memory || d.prefetch_factor || d.persistent_workers || o.ddp.bucket_cap_mb ||
         o.ddp.gradient_as_bucket_view || o.intra_op_threads;
}

std::string python_knobs_json(const Overlay& o) {
  std::string name = std::filesystem::path(o.file).filename().string();
  if (name.size() > kMaxFileNameInJson) name.resize(kMaxFileNameInJson);
  std::string out = "{\"file\":" + json_string(name);
  std::string loader, ddp, threads;
  member(loader, "num_workers", o.dataloader.num_workers);
  member(loader, "pin_memory", o.dataloader.pin_memory);
  member(loader, "prefetch_factor", o.dataloader.prefetch_factor);
  member(loader, "persistent_workers", o.dataloader.persistent_workers);
  member(ddp, "bucket_cap_mb", o.ddp.bucket_cap_mb);
  member(ddp, "gradient_as_bucket_view", o.ddp.gradient_as_bucket_view);
  member(threads, "intra_op", o.intra_op_threads);
  object(out, "dataloader", loader);
  object(out, "ddp", ddp);
  object(out, "threads", threads);
  return out + '}';
}

void apply_overlay(const Overlay& overlay, spec::Spec& spec) {
  if (has_python_knobs(overlay)) {
    const char* knobs = "its dataloader, ddp and threads knobs are applied by dtrain's PyTorch bootstrap";
    if (spec.health.instrument == spec::Spec::Health::Instrument::off) {
      refuse(overlay, std::string(knobs) + ", which health.instrument: off (--instrument off) turns off.",
             "Drop --instrument off (health.instrument: off), or keep only the overlay's env knobs.");
    }
    if (spec.shell || !agent::runs_python(spec.command)) {
      refuse(overlay, std::string(knobs) + ", which reaches only workers whose command runs Python (a script, "
                      "-m MODULE or -c), and this job's command does not" +
                      (spec.shell ? " (shell: true commands are not looked into)." : "."),
             "Run the PyTorch script itself (python3 train.py ...), or keep only the overlay's env knobs: "
             "dtrain-trainer and other programs have no such knobs.");
    }
    spec.tune_env["DTRAIN_TUNE"] = python_knobs_json(overlay);
  }
  for (const auto& [name, value] : overlay.env) spec.tune_env[name] = value;
  if (overlay.binding) spec.binding = *overlay.binding;
}

}  // namespace dtrain::tune
