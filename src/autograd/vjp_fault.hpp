// A deliberately wrong gradient rule, for tests of the gradient checks only:
// while a VjpFault lives, every operand gradient the rule of one op gives is
// multiplied by a factor, so a test can show that a check catches a wrong
// rule and names the parameters behind it.
//
// It lives here, not in include/wholestep: a user's program cannot reach it
// (the library's internal headers are not installed or on its include
// path), so it is never part of the API a user sees. The tests include it
// directly; the command line reaches it through a hidden option of `check`
// (--testing-scale-vjp, left out of --help), so that a test of the program
// itself can watch `wholestep check` fail.
#pragma once

#include <string_view>

#include "ir/op.hpp"

namespace ws::autograd {

// It swaps the op's entry in the rule table (replace_vjp_rule) for a rule
// that calls the real one and scales what it gives, and puts the real one
// back when it dies: the differentiation itself knows nothing of faults.
class VjpFault {
 public:
  // Throws ws::Error when `op` names no differentiable op. One at a time;
  // not thread-safe (tests only).
  VjpFault(std::string_view op, double factor);
  ~VjpFault();
  VjpFault(const VjpFault&) = delete;
  VjpFault& operator=(const VjpFault&) = delete;
};

}  // namespace ws::autograd
