// The byte-level text data set: any file gives windows or a ws::Error.
#include "fuzz_util.hpp"
#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first two bytes choose the window and the batch; the rest is text.
  const int64_t context = size > 0 ? data[0] % 80 : 1, batch = size > 1 ? data[1] % 5 : 1;
  try {
    const ws::data::ByteText text(ws::fuzz::as_file(data, size));
    for (const char* part : {"train", "val"}) {
      const ws::data::ByteText p = text.split(part);
      const ws::data::TextBatch b = p.sample(batch, context, 7, 3);
      const int64_t* in = b.inputs.data<int64_t>();
      for (int64_t i = 0; i < b.inputs.numel(); ++i)
        if (in[i] < 0 || in[i] >= 256) __builtin_trap();
    }
  } catch (const ws::Error&) {
  }
  return 0;
}
