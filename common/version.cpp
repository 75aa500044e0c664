#include "common/version.h"

namespace dtrain {

std::string_view version() { return DTRAIN_VERSION; }

}  // namespace dtrain
