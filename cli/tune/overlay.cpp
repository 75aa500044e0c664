// Reading a tune overlay (overlay.h says what each key does). The knobs are one table that reading and the
// "accepted" hints both walk; every problem in the file is reported at once, each at its line and column.

#include "cli/tune/overlay.h"

#include <charconv>
#include <cmath>
#include <set>
#include <sstream>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "cli/spec/env_names.h"
#include "cli/spec/reader.h"
#include "cli/spec/value_reader.h"
#include "cli/spec/yaml_documents.h"
#include "common/io/bounded_file.h"

namespace dtrain::tune {
namespace {

using spec::Diagnostic;

// One knob of the bootstrap's: `tune.<section>.<key>`, its type and bounds, and where it goes in the Overlay.
struct Knob {
  enum class Kind { integer, boolean, number };
  std::string_view section;
  std::string_view key;
  Kind kind;
  double min;  // integer, number: the accepted range (a number must be above min when min_exclusive)
  double max;
  bool min_exclusive;
  void (*set)(Overlay&, double);  // boolean: 0 or 1
};

const Knob kKnobs[] = {
    {"dataloader", "num_workers", Knob::Kind::integer, 0, kMaxNumWorkers, false,
     [](Overlay& o, double v) { o.dataloader.num_workers = static_cast<int>(v); }},
    {"dataloader", "pin_memory", Knob::Kind::boolean, 0, 1, false,
     [](Overlay& o, double v) { o.dataloader.pin_memory = v != 0; }},
    {"dataloader", "prefetch_factor", Knob::Kind::integer, 1, kMaxPrefetchFactor, false,
     [](Overlay& o, double v) { o.dataloader.prefetch_factor = static_cast<int>(v); }},
    {"dataloader", "persistent_workers", Knob::Kind::boolean, 0, 1, false,
     [](Overlay& o, double v) { o.dataloader.persistent_workers = v != 0; }},
    {"ddp", "bucket_cap_mb", Knob::Kind::number, 0, kMaxBucketCapMb, true,
     [](Overlay& o, double v) { o.ddp.bucket_cap_mb = v; }},
    {"ddp", "gradient_as_bucket_view", Knob::Kind::boolean, 0, 1, false,
     [](Overlay& o, double v) { o.ddp.gradient_as_bucket_view = v != 0; }},
    {"threads", "intra_op", Knob::Kind::integer, 1, kMaxThreads, false,
     [](Overlay& o, double v) { o.intra_op_threads = static_cast<int>(v); }},
};

constexpr std::string_view kTopKeys = "dataloader, ddp, threads, env, binding, allow_numerics, numerics";

// The keys of a knob section, for hints: "num_workers, pin_memory, ...".
std::string keys_of(std::string_view section) {
  std::string out;
  for (const Knob& knob : kKnobs) {
    if (knob.section == section) out += (out.empty() ? "" : ", ") + std::string(knob.key);
  }
  return out;
}

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string accepted(const Knob& knob) {
  switch (knob.kind) {
    case Knob::Kind::boolean: return "Accepted: true or false.";
    case Knob::Kind::integer:
      return "Accepted: a whole number from " + number_text(knob.min) + " to " + number_text(knob.max) + ".";
    case Knob::Kind::number:
      return "Accepted: a number above " + number_text(knob.min) + ", at most " + number_text(knob.max) + ".";
  }
  return "";
}

std::optional<double> read_number(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

class OverlayReader {
 public:
  explicit OverlayReader(const std::string& file) { overlay_.file = file; }

  void error(const YAML::Node& at, const std::string& key, std::string message, std::string hint = "") {
    Diagnostic d;
    d.file = overlay_.file;
    if (!at.Mark().is_null()) {
      const auto position = spec::detail::position_of(at.Mark());
      d.line = position.line;
      d.column = position.column;
    }
    d.key = key;
    d.message = std::move(message);
    d.hint = std::move(hint);
    problems_.push_back(std::move(d));
  }

  // Calls visit(key, value) for each entry of the mapping `node` at `path`; refuses non-mappings, non-scalar keys and
  // repeated keys. A null node (a key written with nothing after it) is an empty mapping.
  template <class Visit>
  void each_entry(const YAML::Node& node, const std::string& path, std::string_view hint, Visit visit) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      error(node, path, "expected a mapping, got " + spec::detail::describe(node) + ".",
            "Accepted keys: " + std::string(hint) + ".");
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) {
        error(it->first, path, "keys must be plain names, got " + spec::detail::describe(it->first) + ".");
        continue;
      }
      const std::string key = it->first.Scalar();
      if (!seen.insert(key).second) {
        error(it->first, path + "." + key, "repeated key; each key may appear once.", "Remove one of them.");
        continue;
      }
      visit(key, it->second, it->first);
    }
  }

  void read_knob(const Knob& knob, const YAML::Node& value, const std::string& path) {
    const std::string text = value.IsScalar() ? value.Scalar() : "";
    std::optional<double> v;
    if (value.IsScalar() && knob.kind == Knob::Kind::boolean) {
      if (text == "true" || text == "false") v = text == "true" ? 1 : 0;
    } else if (value.IsScalar() && knob.kind == Knob::Kind::integer) {
      if (const auto i = spec::detail::parse_int(text)) v = *i;
    } else if (value.IsScalar()) {
      v = read_number(text);
    }
    const bool in_range = v && (knob.kind == Knob::Kind::boolean ||
                                ((knob.min_exclusive ? *v > knob.min : *v >= knob.min) && *v <= knob.max));
    if (!in_range) {
      error(value, path, "invalid value " + spec::detail::describe(value) + ".", accepted(knob));
      return;
    }
    knob.set(overlay_, *v);
  }

  void read_section(std::string_view section, const YAML::Node& node) {
    const std::string prefix = "tune." + std::string(section);
    const std::string keys = keys_of(section);
    each_entry(node, prefix, keys, [&](const std::string& key, const YAML::Node& value, const YAML::Node& at) {
      for (const Knob& knob : kKnobs) {
        if (knob.section == section && knob.key == key) return read_knob(knob, value, prefix + "." + key);
      }
      error(at, prefix + "." + key, "unknown key.", "Accepted keys under " + prefix + ": " + keys + ".");
    });
  }

  void read_env(const YAML::Node& node) {
    each_entry(node, "tune.env", "NCCL_* or PYTORCH_CUDA_ALLOC_CONF",
               [&](const std::string& name, const YAML::Node& value, const YAML::Node& at) {
                 const std::string path = "tune.env." + name;
                 if (!env_allowed(name)) {
                   error(at, path, "not a variable a tune overlay may set.",
                         "Accepted: NCCL_<NAME> and PYTORCH_CUDA_ALLOC_CONF, which change how fast the job runs, "
                         "not what it computes; threads are threads.intra_op; set anything else in the job's env.");
                 } else if (!value.IsScalar() || value.Scalar().size() > kMaxEnvValueBytes ||
                            value.Scalar().find('\0') != std::string::npos) {
                   error(value, path, "invalid value " + spec::detail::describe(value) + ".",
                         "Accepted: one string of at most " + std::to_string(kMaxEnvValueBytes) + " bytes.");
                 } else {
                   overlay_.env[name] = value.Scalar();
                 }
               });
  }

  // Called once allow_numerics is known, whatever order the keys were written in.
  void read_numerics(const YAML::Node& node) {
    each_entry(node, "tune.numerics", "none yet", [&](const std::string& key, const YAML::Node&, const YAML::Node& at) {
      if (!overlay_.allow_numerics) {
        error(at, "tune.numerics." + key, "changes the numbers the script computes and is refused without "
              "`allow_numerics: true` under tune:.", "No numerics knob is implemented yet either; remove it.");
      } else {
        error(at, "tune.numerics." + key, "no numerics knob is implemented yet.",
              "Accepted keys under tune.numerics: none; remove it.");
      }
    });
  }

  void read_tune(const YAML::Node& tune) {
    YAML::Node numerics;
    each_entry(tune, "tune", kTopKeys, [&](const std::string& key, const YAML::Node& value, const YAML::Node& at) {
      if (key == "dataloader" || key == "ddp" || key == "threads") {
        read_section(key, value);
      } else if (key == "env") {
        read_env(value);
      } else if (key == "numerics") {
        numerics = value;
      } else if (key == "binding") {
        if (value.IsScalar() && (value.Scalar() == "auto" || value.Scalar() == "none")) {
          overlay_.binding = value.Scalar() == "auto" ? spec::Binding::automatic : spec::Binding::none;
        } else {
          error(value, "tune.binding", "invalid value " + spec::detail::describe(value) + ".",
                "Accepted: auto or none (the job spec's binding).");
        }
      } else if (key == "allow_numerics") {
        if (value.IsScalar() && (value.Scalar() == "true" || value.Scalar() == "false")) {
          overlay_.allow_numerics = value.Scalar() == "true";
        } else {
          error(value, "tune.allow_numerics", "invalid value " + spec::detail::describe(value) + ".",
                "Accepted: true or false.");
        }
      } else {
        error(at, "tune." + key, "unknown key.", "Accepted keys under tune: " + std::string(kTopKeys) + ".");
      }
    });
    if (numerics) read_numerics(numerics);
  }

  void read_root(const YAML::Node& root) {
    bool found = false;
    each_entry(root, "", "tune", [&](const std::string& key, const YAML::Node& value, const YAML::Node& at) {
      if (key != "tune") {
        error(at, key, "unknown key.", "A tune overlay holds one key, tune:, with " + std::string(kTopKeys) +
                                           " under it.");
        return;
      }
      found = true;
      read_tune(value);
    });
    if (!found && problems_.empty()) {
      error(root, "tune", "missing: the file has no tune: mapping.",
            "Write e.g. `tune: {dataloader: {num_workers: 4}}`.");
    }
  }

  Overlay take() {
    if (!problems_.empty()) throw spec::SpecError(std::move(problems_));
    return std::move(overlay_);
  }

 private:
  Overlay overlay_;
  std::vector<Diagnostic> problems_;
};

[[noreturn]] void fail(const std::string& file, std::string message, std::string hint, const YAML::Mark& at) {
  Diagnostic d;
  d.file = file;
  if (!at.is_null()) {
    const auto position = spec::detail::position_of(at);
    d.line = position.line;
    d.column = position.column;
  }
  d.message = std::move(message);
  d.hint = std::move(hint);
  throw spec::SpecError({std::move(d)});
}

}  // namespace

bool env_allowed(std::string_view name) {
  if (name == "PYTORCH_CUDA_ALLOC_CONF") return true;
  if (!name.starts_with("NCCL_") || name.size() == 5) return false;
  return spec::detail::valid_env_name(name);
}

Overlay parse_overlay(std::string_view yaml, const std::string& file) {
  const std::string text(yaml);
  YAML::Node root;
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    // At most two documents' starts: yaml-cpp 0.7's LoadAll never returns on some text (cli/spec/load.cpp), so the
    // overlay is read with Load (its first document) after this says there is no second one.
    spec::DocumentStarts starts;
    for (int i = 0; i < 2 && parser.HandleNextDocument(starts); ++i) {
    }
    if (starts.marks.size() > 1) {
      fail(file, "a tune overlay is one YAML document, this file has more.", "Remove the '---' separators.",
           YAML::Mark::null_mark());
    }
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(file, "invalid YAML: " + e.msg + ".", "Check the indentation and quoting here and on the line before.",
         e.mark);
  }
  OverlayReader reader(file);
  reader.read_root(root);
  return reader.take();
}

Overlay load_overlay_file(const std::string& path) {
  const Result<std::string> text = read_bounded_file(path, FileBound{kMaxOverlayBytes});
  if (!text.ok()) {
    fail("", "--tune: " + text.status.message() + ".",
         "Pass the path of a tune overlay (YAML, at most " + std::to_string(kMaxOverlayBytes) + " bytes).",
         YAML::Mark::null_mark());
  }
  return parse_overlay(text.value, path);
}

}  // namespace dtrain::tune
