// The IDX reader (Fashion-MNIST's format, gzip or not): any bytes give an
// array or a ws::Error, never a crash, a hang or an allocation beyond what
// the file can hold.
#include "fuzz_util.hpp"
#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ws::data::IdxArray a = ws::data::read_idx(ws::fuzz::as_file(data, size));
    size_t n = 1;
    for (int64_t d : a.dims) n *= size_t(d);
    if (n != a.values.size()) __builtin_trap();  // the dims describe the values
  } catch (const ws::Error&) {
  }
  return 0;
}
