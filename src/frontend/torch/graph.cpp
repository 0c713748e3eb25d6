// Graph: the importer appends the forward of a torch program through it,
// one IR node per call, each stamped with the user's source line; shape
// errors are ws::Errors naming it, raised in Python as wholestep.Error.
#include <pybind11/stl.h>

#include <fmt/format.h>

#include "frontend/torch/frontend.hpp"
#include "ir/op.hpp"
#include "ir/text.hpp"
#include "nn/composites.hpp"
#include "step/forward_trace.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::frontend::torch {
namespace {

ir::InputRole parse_input_role(const std::string& s) {
  ir::InputRole r;
  if (!ir::parse_role(s, &r)) throw Error(fmt::format("unknown input role '{}'", s));
  return r;
}

ir::AttrValue attr_value(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return int64_t(v.cast<bool>());
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    bool all_int = true;
    for (py::handle e : v) all_int = all_int && py::isinstance<py::int_>(e);
    if (all_int) return v.cast<std::vector<int64_t>>();
    return v.cast<std::vector<double>>();
  }
  throw Error(fmt::format("attribute '{}': cannot convert {} to an IR attribute", name,
                          py::str(v.get_type()).cast<std::string>()));
}

class Graph {
 public:
  // The location stamped on the nodes appended next.
  void set_loc(const std::string& file, int line) { b().loc = SourceLoc{file, line}; }

  int64_t persistent(const std::string& role, const std::string& name, const Tensor& t) {
    return int64_t(trace().persistent(parse_input_role(role), name, t));
  }
  int64_t hyper(const std::string& name) { return int64_t(trace().hyper(name)); }
  int64_t data(const std::string& dtype, const Shape& shape) {
    return int64_t(trace().data_value(ir::Type{parse_dtype(dtype), shape}));
  }
  int64_t op(const std::string& name, const std::vector<int64_t>& args, const py::dict& attrs) {
    const std::optional<ir::Op> op = ir::op_from_name(name);
    if (!op) throw Error(fmt::format("the IR has no op '{}'", name));
    std::vector<std::pair<std::string, ir::AttrValue>> kv;
    for (auto [k, v] : attrs) {
      const std::string key = k.cast<std::string>();
      kv.emplace_back(key, attr_value(key, v));
    }
    std::sort(kv.begin(), kv.end(), [](auto& x, auto& y) { return x.first < y.first; });
    std::vector<ir::ValueId> ids;
    for (int64_t a : args) ids.push_back(value(a));
    return int64_t(b().add(*op, std::move(ids), ir::Attrs::from_sorted(std::move(kv))));
  }
  // Composite op `name` of wholestep's C++ library (nn/composites.hpp) on
  // values `args` (None: an optional operand absent): its results' values
  // (None: a result it does not give). Its nodes carry the current location.
  py::list composite(const std::string& name, const py::list& args, const py::dict& attrs) {
    capture::Tracer& tr = trace().tracer();
    std::vector<Tensor> in;
    for (py::handle a : args)
      in.push_back(a.is_none() ? Tensor() : tr.wrap(value(a.cast<int64_t>())));
    std::map<std::string, ir::AttrValue> kv;
    for (auto [k, v] : attrs) {
      const std::string key = k.cast<std::string>();
      kv.emplace(key, attr_value(key, v));
    }
    const SourceLoc loc = b().loc;
    std::vector<Tensor> out;
    {
      capture::TraceScope scope(tr);
      ScopedSourceLoc stamp(loc);
      out = nn::call_composite(name, in, kv);
    }
    py::list result;
    for (const Tensor& t : out) {
      if (t.defined())
        result.append(int64_t(tr.value_of(t, loc)));
      else
        result.append(py::none());
    }
    return result;
  }
  int64_t full(double value, const std::string& dtype, const Shape& shape) {
    return int64_t(b().full(value, ir::Type{parse_dtype(dtype), shape}));
  }
  // Each element's index along `axis`.
  int64_t iota(const std::string& dtype, const Shape& shape, int64_t axis) {
    return int64_t(b().iota(ir::Type{parse_dtype(dtype), shape}, axis));
  }
  int64_t constant(const std::vector<double>& values, const std::string& dtype,
                   const Shape& shape) {
    return int64_t(b().constant(values, ir::Type{parse_dtype(dtype), shape}));
  }
  // Uniform numbers in [0, 1) from the process's counter-based stream (the
  // same one the C++ API's dropout draws from).
  int64_t random_uniform(const std::string& dtype, const Shape& shape) {
    const capture::Tracer::RandomDraw d = trace().tracer().take_random(numel(shape));
    return int64_t(b().add(ir::Op::random_uniform, {d.seed, d.offset},
                           ir::Attrs{{"dtype", dtype}, {"shape", shape}, {"skip", d.skip}}));
  }
  // v reduced ("sum" or "mean") over the process group by a collective
  // started and waited for at once.
  int64_t all_reduce(int64_t v, const std::string& reduce) {
    return int64_t(b().all_reduce(value(v), reduce));
  }
  // `buffer` (a persistent tensor) holds `v` after the step.
  void assign(const Tensor& buffer, int64_t v) {
    capture::Tracer& t = trace().tracer();
    t.assign(buffer, t.wrap(value(v)), b().loc);
  }
  void output(const std::string& role, int64_t v, const std::string& name) {
    ir::OutputRole r;
    if (!ir::parse_role(role, &r) || (r != ir::OutputRole::loss && r != ir::OutputRole::user))
      throw Error(fmt::format("a forward's output is a loss or a user output, not '{}'", role));
    trace().graph().outputs.push_back(ir::Output{r, value(v), ir::kNoValue, name});
  }
  py::tuple type(int64_t v) {
    const ir::Type& t = trace().graph().type(value(v));
    return py::make_tuple(dtype_name(t.dtype), py::tuple(py::cast(t.shape)));
  }
  std::string text() { return ir::print(trace().graph()); }
  FinishedTrace finish() {
    FinishedTrace f{trace().finish()};
    trace_.reset();
    return f;
  }

 private:
  step::ForwardTrace& trace() {
    if (!trace_) throw Error("this graph was finished already");
    return *trace_;
  }
  ir::Builder& b() { return trace().builder(); }
  ir::ValueId value(int64_t v) {
    if (v < 0 || v >= int64_t(trace().graph().size()))
      throw Error(fmt::format("no value %{} in the graph being traced", v));
    return ir::ValueId(v);
  }
  std::unique_ptr<step::ForwardTrace> trace_ = std::make_unique<step::ForwardTrace>();
};

}  // namespace

void bind_graph(py::module_& m) {
  m.def("composites", [] {
    py::list out;
    for (const nn::Composite& c : nn::composites())
      out.append(py::dict(
          py::arg("name") = std::string(c.name), py::arg("operands") = std::string(c.operands),
          py::arg("attrs") = std::string(c.attrs), py::arg("results") = std::string(c.results),
          py::arg("meaning") = std::string(c.meaning)));
    return out;
  });
  py::class_<FinishedTrace>(m, "FinishedTrace");
  py::class_<Graph>(m, "Graph")
      .def(py::init<>())
      .def("set_loc", &Graph::set_loc, py::arg("file"), py::arg("line"))
      .def("persistent", &Graph::persistent, py::arg("role"), py::arg("name"), py::arg("tensor"))
      .def("hyper", &Graph::hyper, py::arg("name"))
      .def("data", &Graph::data, py::arg("dtype"), py::arg("shape"))
      .def("op", &Graph::op, py::arg("name"), py::arg("args"), py::arg("attrs") = py::dict())
      .def("composite", &Graph::composite, py::arg("name"), py::arg("args"),
           py::arg("attrs") = py::dict())
      .def("full", &Graph::full, py::arg("value"), py::arg("dtype"), py::arg("shape"))
      .def("constant", &Graph::constant, py::arg("values"), py::arg("dtype"), py::arg("shape"))
      .def("iota", &Graph::iota, py::arg("dtype"), py::arg("shape"), py::arg("axis"))
      .def("random_uniform", &Graph::random_uniform, py::arg("dtype"), py::arg("shape"))
      .def("all_reduce", &Graph::all_reduce, py::arg("value"), py::arg("reduce"))
      .def("assign", &Graph::assign, py::arg("buffer"), py::arg("value"))
      .def("output", &Graph::output, py::arg("role"), py::arg("value"), py::arg("name"))
      .def("type", &Graph::type, py::arg("value"))
      .def("text", &Graph::text)
      .def("finish", &Graph::finish);
}

}  // namespace ws::frontend::torch
