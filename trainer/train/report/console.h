#pragma once

// dtrain-trainer's console: progress (info) on stdout, warnings and errors on stderr, one line each with a time
// stamp and the level. Only rank 0 shows progress: the others show warnings and errors only.

namespace dtrain::trainer {

// Makes this split logger spdlog's default. Call once, first thing in main.
void setup_console();

// Hides progress on a rank other than 0.
void quiet_console_unless_rank0(int rank);

}  // namespace dtrain::trainer
