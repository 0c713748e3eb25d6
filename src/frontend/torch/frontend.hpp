// The PyTorch frontend's extension module, wholestep._C: what the Python
// package (python/wholestep/) needs of the library, and nothing below the
// step layer's seam (step/step_source.hpp). The importer itself (aten ops
// to IR ops) is Python; it appends nodes through Graph.
#pragma once

#include <pybind11/pybind11.h>

#include "step/capture_step.hpp"
#include "wholestep/tensor.hpp"

namespace ws::frontend::torch {

namespace py = pybind11;

// Graph: a forward being traced (step::ForwardTrace) as the importer sees it.
void bind_graph(py::module_& m);
// Tensor (borrowed memory), TrainStep and Forward over Python sources.
void bind_steps(py::module_& m);
// The fast path of the module guard (guards.cpp).
void bind_guards(py::module_& m);

// A tensor over memory Python owns: `owner` (a torch tensor) is kept alive
// while the tensor is.
Tensor borrow(uintptr_t ptr, const std::string& dtype, const Shape& shape, py::object owner);
DType parse_dtype(const std::string& s);

// What the importer's trace function returns: the finished forward.
struct FinishedTrace {
  step::CapturedStep cap;
};

}  // namespace ws::frontend::torch
