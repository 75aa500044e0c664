#include "agent/job/round_state.h"

namespace dtrain::agent {

std::optional<RoundState> transition(RoundState from, RoundEvent event) {
  using enum RoundState;
  const bool busy = from == running || from == stopping;
  switch (event) {
    case RoundEvent::prepare:
      if (busy) return std::nullopt;
      return prepared;
    case RoundEvent::start:
      if (busy) return std::nullopt;
      return running;
    case RoundEvent::all_exited:
      // While stopping, the exits are the stop's doing: the group is not done, it is being stopped.
      if (from != running) return std::nullopt;
      return done;
    case RoundEvent::stop:
      return stopping;
    case RoundEvent::swept:
      // A sweep that ends after another already did (two stops at once), or after a new start_group, changes
      // nothing.
      if (from != stopping) return std::nullopt;
      return stopped;
  }
  return std::nullopt;
}

}  // namespace dtrain::agent
