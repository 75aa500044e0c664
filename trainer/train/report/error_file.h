#pragma once

// TORCHELASTIC_ERROR_FILE: a worker that fails writes PyTorch's error.json there, and the launcher shows its
// message in the job's failure summary (as it does for a PyTorch script decorated with @record).

#include <string>

namespace dtrain::trainer {

// PyTorch's format: {"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": ...}}}.
std::string error_file_json(const std::string& message);

// Writes error_file_json(message) to $TORCHELASTIC_ERROR_FILE when it is set; best effort, never throws.
void write_error_file(const std::string& message);

}  // namespace dtrain::trainer
