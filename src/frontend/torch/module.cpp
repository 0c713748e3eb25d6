// wholestep._C: the extension module of the Python package.
#include "frontend/torch/frontend.hpp"

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  m.doc() = "wholestep's library for the Python package (use wholestep.torch)";
  // Every error the library reports to its user; InternalError (a bug in
  // wholestep) is one too, with its own message.
  py::register_exception<ws::Error>(m, "Error", PyExc_RuntimeError);
  ws::frontend::torch::bind_graph(m);
  ws::frontend::torch::bind_steps(m);
  ws::frontend::torch::bind_guards(m);
}
