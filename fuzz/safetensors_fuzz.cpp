// The safetensors reader: any bytes give tensors or a ws::Error; what it
// reads, written back and read again, is the same.
#include <cstring>

#include "fuzz_util.hpp"
#include "wholestep/checkpoint.hpp"
#include "wholestep/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ws::SafetensorsFile f;
  try {
    f = ws::read_safetensors(ws::fuzz::as_file(data, size));
  } catch (const ws::Error&) {
    return 0;
  }
  static const ws::fuzz::OwnFile written("again");
  const std::string& again = written.path;
  try {
    ws::write_safetensors(again, f.tensors, f.metadata);
  } catch (const ws::Error&) {
    return 0;  // a name the writer refuses (it reads any)
  }
  const ws::SafetensorsFile g = ws::read_safetensors(again);
  if (g.metadata != f.metadata || g.tensors.size() != f.tensors.size()) __builtin_trap();
  auto raw = [](const ws::Tensor& t) -> const void* {
    switch (t.dtype()) {
      case ws::DType::f32: return t.data<float>();
      case ws::DType::f64: return t.data<double>();
      case ws::DType::i64: return t.data<int64_t>();
      case ws::DType::b8: return t.data<uint8_t>();
    }
    return nullptr;
  };
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const ws::Tensor &a = f.tensors[i].second, &b = g.tensors[i].second;
    if (f.tensors[i].first != g.tensors[i].first || a.str() != b.str() ||
        std::memcmp(raw(a), raw(b), a.nbytes()) != 0)
      __builtin_trap();
  }
  return 0;
}
