// Element types and shapes shared by the public API and the IR.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ws {

// f32 for training, f64 for gradient checks, i64 for labels and indices,
// b8 (bool, one byte) for masks. There is no implicit promotion.
enum class DType : uint8_t { f32, f64, i64, b8 };

using Shape = std::vector<int64_t>;

const char* dtype_name(DType d);  // "f32", "f64", "i64", "bool"
size_t dtype_size(DType d);
bool is_floating(DType d);
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[128,784]"

}  // namespace ws
