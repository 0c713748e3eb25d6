// The composite ops: the layers, activations, normalizations and losses that
// are compositions of IR ops, defined once here and called by every
// frontend. The C++ API calls the functions of wholestep/nn.hpp directly;
// the PyTorch importer calls them by name through this table
// (python/wholestep/_aten*.py maps each ATen op to one), so a model traced
// from either side records the same graph, and the importer's support table
// (docs/pytorch.md) names the composite each ATen op becomes.
//
// Adding one: its function in wholestep/nn.hpp (src/nn/), a row of the table
// in composites.cpp, the ATen ops that use it in python/wholestep/_aten*.py,
// and a case in tests/python/test_composites.py.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"
#include "wholestep/tensor.hpp"

namespace ws::nn {

// The start of the message of the check nll_loss puts on its labels' upper
// bound: the train step finds the labels by it and checks them when it is
// called, naming the argument (step/capture_step.cpp).
inline constexpr std::string_view kLabelRangeCheck = "nll_loss: a label is out of range";

// A composite's attributes, checked against its schema and completed with
// its defaults: read by name and kind (an int where a float is asked for is
// that float).
class CompositeAttrs {
 public:
  double f64(std::string_view name) const;
  int64_t i64(std::string_view name) const;
  bool flag(std::string_view name) const { return i64(name) != 0; }
  const std::vector<int64_t>& ints(std::string_view name) const;
  std::vector<double> floats(std::string_view name) const;  // whole numbers too
  const std::string& str(std::string_view name) const;

  std::map<std::string, ir::AttrValue, std::less<>> values;
  std::string_view composite;
};

struct Composite {
  std::string_view name;
  // Operand names in order, `name?` when it may be undefined.
  std::string_view operands;
  // `name:kind` or `name:kind=default`, kind int, float, ints, floats or string.
  std::string_view attrs;
  // Result names in order (a result may be undefined: a running statistic
  // not updated).
  std::string_view results;
  // One line for the docs.
  std::string_view meaning;
  std::vector<Tensor> (*fn)(std::span<const Tensor> in, const CompositeAttrs& a, Loc loc);
};

// Every composite, sorted by name.
std::span<const Composite> composites();

// Runs composite `name` on `operands` (undefined where an optional one is
// absent) with `attrs`: a ws::Error naming the composite when the name, an
// operand or an attribute is wrong.
std::vector<Tensor> call_composite(std::string_view name, std::span<const Tensor> operands,
                                   const std::map<std::string, ir::AttrValue>& attrs,
                                   Loc loc = Loc::current());

}  // namespace ws::nn
