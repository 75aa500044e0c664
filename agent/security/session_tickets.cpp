#include "agent/security/session_tickets.h"

#include <openssl/bio.h>
#include <openssl/conf.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <string>

namespace dtrain::security {
namespace {

// The names under which this process's configuration is loaded: they must not collide with a system section.
constexpr const char* kAppName = "dtrain_tls_init";
constexpr const char* kSystemDefault = "system_default";

struct ConfDeleter {
  void operator()(CONF* conf) const { NCONF_free(conf); }
};
using Conf = std::unique_ptr<CONF, ConfDeleter>;

// A value as the configuration syntax reads it back: backslash escapes what would start a comment, a variable or
// a quote.
std::string quoted(const char* value) {
  std::string out;
  for (const char* c = value; *c; ++c) {
    if (*c == '\\' || *c == '#' || *c == '$' || *c == '"' || *c == '\'' || *c == ';') out += '\\';
    out += *c;
  }
  return out;
}

// Appends section `name` of `conf` under the new name `as`; `skip` is a key left out.
void copy_section(CONF* conf, const char* name, const std::string& as, const char* skip, std::string& text) {
  text += "[" + as + "]\n";
  STACK_OF(CONF_VALUE)* values = NCONF_get_section(conf, name);
  for (int i = 0; values && i < sk_CONF_VALUE_num(values); ++i) {
    const CONF_VALUE* v = sk_CONF_VALUE_value(values, i);
    if (skip && OPENSSL_strcasecmp(v->name, skip) == 0) continue;
    text += std::string(v->name) + " = " + quoted(v->value) + "\n";
  }
}

// The system configuration's ssl_conf sections, renamed, with NumTickets = 0 in its system_default: loading them
// replaces what OpenSSL read at start (its ssl_conf module keeps one set of sections).
std::string configuration() {
  std::string text = std::string(kAppName) + " = dtrain_init\n[dtrain_init]\nssl_conf = dtrain_ssl\n";
  Conf system(NCONF_new(nullptr));
  char* file = CONF_get1_default_config_file();
  const bool loaded = system && file && NCONF_load(system.get(), file, nullptr) == 1;
  OPENSSL_free(file);
  ERR_clear_error();   // no system configuration is a normal case
  const char* init = loaded ? NCONF_get_string(system.get(), nullptr, "openssl_conf") : nullptr;
  const char* ssl = init ? NCONF_get_string(system.get(), init, "ssl_conf") : nullptr;
  ERR_clear_error();
  std::string sections, own_default = "[dtrain_system_default]\n";
  text += "[dtrain_ssl]\n" + std::string(kSystemDefault) + " = dtrain_system_default\n";
  STACK_OF(CONF_VALUE)* names = ssl ? NCONF_get_section(system.get(), ssl) : nullptr;
  for (int i = 0; names && i < sk_CONF_VALUE_num(names); ++i) {
    const CONF_VALUE* v = sk_CONF_VALUE_value(names, i);
    if (OPENSSL_strcasecmp(v->name, kSystemDefault) == 0) {
      std::string copy;
      copy_section(system.get(), v->value, "dtrain_system_default", "NumTickets", copy);
      own_default = copy;
      continue;
    }
    const std::string as = "dtrain_ssl_" + std::to_string(i);
    text += std::string(v->name) + " = " + as + "\n";
    copy_section(system.get(), v->value, as, nullptr, sections);
  }
  return text + sections + own_default + "NumTickets = 0\n";
}

bool apply() {
  // OpenSSL reads the system configuration once per process, on first use: read it now, so that nothing reads it
  // after this and replaces these sections.
  if (OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, nullptr) != 1) return false;
  const std::string text = configuration();
  Conf conf(NCONF_new(nullptr));
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())),
                                                &BIO_free);
  long line = 0;
  const bool ok = conf && bio && NCONF_load_bio(conf.get(), bio.get(), &line) == 1 &&
                  CONF_modules_load(conf.get(), kAppName, 0) > 0;
  ERR_clear_error();
  return ok;
}

}  // namespace

bool disable_session_tickets() {
  static std::once_flag once;
  static bool applied = false;
  std::call_once(once, [] { applied = apply(); });
  return applied;
}

}  // namespace dtrain::security
