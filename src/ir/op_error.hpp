// The user-facing errors of shape inference (infer.cpp) and of the
// convolution and pooling geometry (geometry.cpp): ws::Error "conv2d: what
// (at file:line)".
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "ir/op.hpp"
#include "wholestep/error.hpp"

namespace ws::ir {

[[noreturn]] inline void fail_op(Op op, const std::string& what, const SourceLoc& loc) {
  throw Error(fmt::format("{}: {}{}", op_name(op), what, at(loc)));
}

// a + b (sign '+') or a * b (sign 'x') of sizes and geometry from user
// attributes or IR text, where an overflow is the user's error, never a
// wrapped value.
inline int64_t checked(Op op, int64_t a, char sign, int64_t b, const std::string& what,
                       const SourceLoc& loc) {
  int64_t r = 0;
  if (sign == '+' ? __builtin_add_overflow(a, b, &r) : __builtin_mul_overflow(a, b, &r))
    fail_op(op, fmt::format("{} overflows 64 bits ({} {} {})", what, a, sign, b), loc);
  return r;
}
inline int64_t add_checked(Op op, int64_t a, int64_t b, const std::string& what,
                           const SourceLoc& loc) {
  return checked(op, a, '+', b, what, loc);
}
inline int64_t mul_checked(Op op, int64_t a, int64_t b, const std::string& what,
                           const SourceLoc& loc) {
  return checked(op, a, 'x', b, what, loc);
}

}  // namespace ws::ir
