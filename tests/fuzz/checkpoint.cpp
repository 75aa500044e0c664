// Fuzz target: the checkpoint readers dtrain-trainer uses for --init-from and --resume. The input's first byte
// chooses the file: an llm.c model checkpoint (header, then every parameter) or a trainer state file (header,
// AdamW moments, checksum). Each is read the way the trainer does: the header first, then the body into a buffer
// of the size the header announces, as long as that is no more than the file holds. Any input must end in the
// values or a CheckpointError.

#include <cstddef>
#include <cstdint>
#include <sys/stat.h>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "trainer/ckpt/model_file.h"
#include "trainer/ckpt/state_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain::trainer;
  if (size < 1) return 0;
  const bool state = data[0] & 1;
  const dtrain::fuzz::MemFile file(data + 1, size - 1);
  const std::size_t file_floats = (size - 1) / sizeof(float);
  try {
    if (!state) {
      const GptConfig config = read_model_header(file.path());
      // The parameter count belongs to the model the trainer builds; any count no larger than the file is a
      // request the reader must answer with the parameters or an error.
      for (const std::size_t count : {file_floats > 256 ? file_floats - 256 : 0, file_floats}) {
        std::vector<float> params(count);
        (void)read_model_file(file.path(), config, params.data(), count);
      }
    } else {
      const TrainState header = read_state_header(file.path());
      // A header that read_state_header accepted promises exactly num_params floats of m and of v in the file.
      if (header.num_params > file_floats) __builtin_trap();
      std::vector<float> m(header.num_params), v(header.num_params);
      (void)read_state_file(file.path(), m.data(), v.data(), header.num_params);
    }
  } catch (const CheckpointError&) {
  }
  return 0;
}
