// The fast path of the guard on a model's modules (python/wholestep/
// _guards.py, ModelViews): the state of the dicts model_view reads, to see
// that none of them changed since its last walk.
#include <Python.h>

#include <cstdint>
#include <vector>

#include "frontend/torch/frontend.hpp"

namespace ws::frontend::torch {
namespace {

// CPython 3.11 gives every dict a version tag (PEP 509) that every change
// of the dict replaces with a new value of a process-wide counter (a new
// dict takes one too), so a dict's address and tag name one state of one
// dict for the life of the process. 3.12 deprecates the tag (PEP 699) and
// later versions stop changing it: elsewhere there is no fast path.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define WS_DICT_VERSION_TAGS 1
#else
#define WS_DICT_VERSION_TAGS 0
#endif

// Per module: its type; its __dict__; each dict of `names` in it (address
// and tag of each dict). None where dicts keep no tags, or a module lacks
// one of the dicts.
py::object module_dicts(const py::list& modules, const py::tuple& names) {
#if WS_DICT_VERSION_TAGS
  std::vector<uint64_t> out;
  out.reserve(modules.size() * (3 + 2 * names.size()));
  auto add = [&out](PyObject* d) {
    out.push_back(reinterpret_cast<uintptr_t>(d));
    out.push_back(reinterpret_cast<PyDictObject*>(d)->ma_version_tag);
  };
  for (py::handle m : modules) {
    out.push_back(reinterpret_cast<uintptr_t>(Py_TYPE(m.ptr())));
    PyObject* d = PyObject_GenericGetDict(m.ptr(), nullptr);  // a new reference
    if (d == nullptr) throw py::error_already_set();
    const py::object dict = py::reinterpret_steal<py::object>(d);
    if (!PyDict_Check(d)) return py::none();
    add(d);
    for (py::handle name : names) {
      PyObject* v = PyDict_GetItemWithError(d, name.ptr());  // borrowed
      if (v == nullptr && PyErr_Occurred()) throw py::error_already_set();
      if (v == nullptr || !PyDict_Check(v)) return py::none();
      add(v);
    }
  }
  return py::bytes(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(uint64_t));
#else
  (void)modules;
  (void)names;
  return py::none();
#endif
}

// A dict's version tag (which every change of it replaces); None where
// dicts keep no tags.
py::object dict_version(const py::handle& d) {
  if (!PyDict_Check(d.ptr())) throw py::type_error("dict_version: not a dict");
#if WS_DICT_VERSION_TAGS
  return py::int_(reinterpret_cast<PyDictObject*>(d.ptr())->ma_version_tag);
#else
  return py::none();
#endif
}

}  // namespace

void bind_guards(py::module_& m) {
  m.def("module_dicts", &module_dicts, py::arg("modules"), py::arg("names"),
        "The state of each module's __dict__ and of the dicts `names` in it, as bytes equal "
        "from call to call only while none of them changed; None where Python keeps no "
        "version tags on dicts (other than 3.11) or a module lacks one of the dicts");
  m.def("dict_version", &dict_version, py::arg("d"),
        "The version tag of dict `d`, which every change of it replaces (a dict and its tag "
        "name one state of it while the dict lives); None where Python keeps no tags");
}

}  // namespace ws::frontend::torch
