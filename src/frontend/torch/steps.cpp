// TrainStep and Forward over Python sources: the importer traces (with the
// GIL, called back from the step layer when a signature is new); the
// package passes each step's data and hyperparameters. A step runs without
// the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frontend/torch/frontend.hpp"
#include "step/option_doc.hpp"
#include "step/step_source.hpp"
#include "tensor/tensor_impl.hpp"
#include "wholestep/dist.hpp"

namespace ws::frontend::torch {

DType parse_dtype(const std::string& s) {
  for (DType d : {DType::f32, DType::f64, DType::i64, DType::b8})
    if (s == dtype_name(d)) return d;
  throw Error(fmt::format("unknown dtype '{}': expected f32, f64, i64 or bool", s));
}

Tensor borrow(uintptr_t ptr, const std::string& dtype, const Shape& shape, py::object owner) {
  // The owner is released with the GIL, whichever thread frees the tensor
  // (a compiled step evicted while a step runs without it).
  std::shared_ptr<void> keep(new py::object(std::move(owner)), [](void* o) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(o);
  });
  return detail::borrow(reinterpret_cast<void*>(ptr), ir::Type{parse_dtype(dtype), shape},
                        std::move(keep));
}

namespace {

// A step's data argument: (address, dtype, shape) of memory the caller
// keeps alive for the call.
using DataArg = std::tuple<uintptr_t, std::string, Shape>;

std::vector<Tensor> data_tensors(const std::vector<DataArg>& args) {
  std::vector<Tensor> out;
  out.reserve(args.size());
  for (const auto& [ptr, dtype, shape] : args)
    out.push_back(
        detail::borrow(reinterpret_cast<void*>(ptr), ir::Type{parse_dtype(dtype), shape}, nullptr));
  return out;
}

py::list types_list(const std::vector<ir::Type>& types) {
  py::list l;
  for (const ir::Type& t : types) l.append(py::make_tuple(dtype_name(t.dtype), py::cast(t.shape)));
  return l;
}

step::CapturedStep call_trace(const py::object& fn, const std::vector<ir::Type>& types) {
  py::gil_scoped_acquire gil;
  py::object r = fn(types_list(types));
  return std::move(r.cast<FinishedTrace&>().cap);
}

class PyStepSource final : public step::StepSource {
 public:
  PyStepSource(py::object trace, std::vector<optim::UpdateGroup> groups,
               std::shared_ptr<step::Accumulation> accumulation)
      : trace_(std::move(trace)),
        groups_(std::move(groups)),
        accumulation_(std::move(accumulation)) {
    size_t n = 0;
    for (const optim::UpdateGroup& g : groups_) n += g.spec.hyper_names.size();
    hypers_.assign(n, 0.0);
  }
  ~PyStepSource() override {
    py::gil_scoped_acquire gil;
    trace_ = py::object();
  }

  step::CapturedStep trace(const std::vector<ir::Type>& types, const SourceLoc&) override {
    return call_trace(trace_, types);
  }
  std::vector<optim::UpdateGroup> update_groups() const override { return groups_; }
  void hyper_values(std::span<double> out) const override {
    std::copy(hypers_.begin(), hypers_.end(), out.begin());
  }
  void advance() override { ++steps_; }
  int64_t step_count() const override { return steps_; }
  // Shared by the package's steps of one model, one per key.
  step::Accumulation& accumulation() override { return *accumulation_; }

  void set_hypers(const std::vector<double>& h) {
    if (h.size() != hypers_.size())
      throw Error(
          fmt::format("the step takes {} hyperparameters, got {}", hypers_.size(), h.size()));
    hypers_ = h;
  }

 private:
  py::object trace_;
  std::vector<optim::UpdateGroup> groups_;
  std::vector<double> hypers_;
  int64_t steps_ = 0;
  std::shared_ptr<step::Accumulation> accumulation_;
};

class PyForwardSource final : public step::ForwardSource {
 public:
  explicit PyForwardSource(py::object trace) : trace_(std::move(trace)) {}
  ~PyForwardSource() override {
    py::gil_scoped_acquire gil;
    trace_ = py::object();
  }
  step::CapturedStep trace(const std::vector<ir::Type>& types, const SourceLoc&) override {
    return call_trace(trace_, types);
  }

 private:
  py::object trace_;
};

optim::UpdateGroup update_group(const py::dict& d) {
  optim::UpdateGroup g;
  optim::UpdateSpec& s = g.spec;
  for (auto [k, v] : d) {
    const std::string key = k.cast<std::string>();
    if (key == "kind")
      s.kind = v.cast<std::string>();
    else if (key == "momentum")
      s.momentum = v.cast<bool>();
    else if (key == "nesterov")
      s.nesterov = v.cast<bool>();
    else if (key == "weight_decay")
      s.weight_decay = v.cast<bool>();
    else if (key == "amsgrad")
      s.amsgrad = v.cast<bool>();
    else if (key == "maximize")
      s.maximize = v.cast<bool>();
    else if (key == "clip")
      s.clip = v.cast<bool>();
    else if (key == "skip_nonfinite_norm")
      s.skip_nonfinite_norm = v.cast<bool>();
    else if (key == "state_slots")
      s.state_slots = v.cast<std::vector<std::string>>();
    else if (key == "global_slots")
      s.global_slots = v.cast<std::vector<std::string>>();
    else if (key == "hyper_names")
      s.hyper_names = v.cast<std::vector<std::string>>();
    else if (key == "params")
      g.params = v.cast<std::vector<size_t>>();
    else
      throw Error(fmt::format("an update group has no field '{}'", key));
  }
  return g;
}

// `v` as option `info` holds it, or none when it is of another type (a
// bool is not an int here, as it is in Python).
std::optional<StepOptionValue> from_python(const StepOptionInfo& info, const py::handle& v) {
  const bool is_bool = py::isinstance<py::bool_>(v), is_int = py::isinstance<py::int_>(v);
  switch (info.kind) {
    case StepOptionKind::flag:
      if (is_bool) return StepOptionValue(v.cast<bool>());
      break;
    case StepOptionKind::integer:
      if (is_int && !is_bool) return StepOptionValue(v.cast<int64_t>());
      break;
    case StepOptionKind::number:
      if (is_int && !is_bool) return StepOptionValue(v.cast<double>());
      if (py::isinstance<py::float_>(v)) return StepOptionValue(v.cast<double>());
      break;
    case StepOptionKind::choice:
      if (py::isinstance<py::str>(v) && step_option_fits(info, v.cast<std::string>()))
        return StepOptionValue(v.cast<std::string>());
      break;
  }
  return std::nullopt;
}

py::object to_python(const StepOptionValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

// The step options `d` names, every other at its default, checked as a
// TrainStep checks them: a ws::Error naming an unknown key (and the
// options), a value of the wrong type, or one out of range.
StepOptions step_options(const py::dict& d) {
  StepOptions o;
  for (auto [k, v] : d) {
    const std::string key = k.cast<std::string>();
    std::optional<StepOptionInfo> info;
    for (const StepOptionInfo& i : step_option_infos())
      if (i.name == key) info = i;
    if (!info) {
      std::vector<std::string> names;
      for (const StepOptionInfo& i : step_option_infos()) names.emplace_back(i.name);
      std::sort(names.begin(), names.end());
      throw Error(
          fmt::format("unknown option '{}'; the options are {}", key, fmt::join(names, ", ")));
    }
    const std::optional<StepOptionValue> value = from_python(*info, v);
    if (!value)
      throw Error(fmt::format("option {}={} ({}); it must be {}", key,
                              py::repr(v).cast<std::string>(),
                              py::str(py::type::handle_of(v).attr("__name__")).cast<std::string>(),
                              step::python_allowed(*info)));
    set_step_option(o, key, *value);
  }
  check_step_options(o);
  return o;
}

// Every option of `o`, by name.
py::dict options_dict(const StepOptions& o) {
  py::dict out;
  for (const StepOptionInfo& info : step_option_infos())
    out[py::str(std::string(info.name))] = to_python(get_step_option(o, info.name));
  return out;
}

// Each option's description, for the package's docstrings and checks.
py::list option_schema() {
  py::list out;
  for (const StepOptionInfo& info : step_option_infos()) {
    py::dict d;
    d["name"] = std::string(info.name);
    d["kind"] = info.kind == StepOptionKind::flag      ? "flag"
                : info.kind == StepOptionKind::integer ? "integer"
                : info.kind == StepOptionKind::number  ? "number"
                                                       : "choice";
    d["default"] = to_python(get_step_option(StepOptions{}, info.name));
    d["least"] = info.least;
    d["most"] = info.most;
    d["choices"] = std::vector<std::string>(info.choices.begin(), info.choices.end());
    d["needs"] = std::string(info.needs);
    d["allowed"] = step::python_allowed(info);
    d["meaning"] = std::string(info.meaning);
    out.append(d);
  }
  return out;
}

py::dict counters_dict(const StepCounters& c) {
  py::dict d;
  d["graphs"] = c.graphs;
  d["kernels"] = c.kernels;
  d["bytes_copied"] = c.bytes_copied;
  d["interface_bytes"] = c.interface_bytes;
  d["arena_bytes"] = c.arena_bytes;
  d["persistent_bytes"] = c.persistent_bytes;
  d["state_bytes"] = c.state_bytes;
  d["peak_bytes"] = c.peak_bytes;
  d["flops"] = c.flops;
  d["collectives"] = c.collectives;
  d["comm_bytes"] = c.comm_bytes;
  return d;
}

// The counters of the last step, and its gradients' norm (None unless the
// step clips).
py::dict stats_dict(const StepResult& r) {
  py::dict d = counters_dict(r.counters);
  d["grad_norm"] = r.grad_norm ? py::object(py::float_(*r.grad_norm)) : py::object(py::none());
  d["updated"] = r.updated;
  d["accumulated"] = r.accumulated;
  d["threads"] = r.threads;
  return d;
}

struct PyTrainStep {
  PyStepSource* source;
  TrainStep step;
  StepResult last;
};

struct PyForward {
  Forward forward;
};

PyTrainStep make_train_step(py::object trace, const std::vector<py::dict>& groups,
                            const py::dict& options,
                            std::shared_ptr<step::Accumulation> accumulation) {
  std::vector<optim::UpdateGroup> gs;
  for (const py::dict& g : groups) gs.push_back(update_group(g));
  auto src =
      std::make_unique<PyStepSource>(std::move(trace), std::move(gs), std::move(accumulation));
  PyStepSource* raw = src.get();
  return PyTrainStep{raw, step::StepFactory::train_step(std::move(src), step_options(options)), {}};
}

// A tensor's values as a numpy array sharing its storage.
py::array to_array(const Tensor& t) {
  const detail::TensorImpl* impl = t.impl();
  py::capsule base(new Tensor(t), [](void* p) { delete static_cast<Tensor*>(p); });
  py::dtype dt = impl->type.dtype == DType::f32   ? py::dtype::of<float>()
                 : impl->type.dtype == DType::f64 ? py::dtype::of<double>()
                 : impl->type.dtype == DType::i64 ? py::dtype::of<int64_t>()
                                                  : py::dtype::of<bool>();
  std::vector<py::ssize_t> shape(impl->type.shape.begin(), impl->type.shape.end());
  return py::array(dt, shape, impl->storage->data, base);
}

// A copy of a float32 or float64 numpy array.
Tensor from_array(const py::array& a) {
  const bool f32 = py::isinstance<py::array_t<float>>(a),
             f64 = py::isinstance<py::array_t<double>>(a);
  if (!f32 && !f64)
    throw Error(fmt::format("an array of {} where float32 or float64 was expected",
                            py::str(a.dtype()).cast<std::string>()));
  const py::array c = py::array::ensure(a, py::array::c_style);
  Tensor t = Tensor::zeros(Shape(c.shape(), c.shape() + c.ndim()), f32 ? DType::f32 : DType::f64);
  std::memcpy(t.impl()->storage->data, c.data(), t.nbytes());
  return t;
}

}  // namespace

void bind_steps(py::module_& m) {
  py::class_<Tensor>(m, "Tensor")
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_name(t.dtype()); })
      .def_property_readonly("shape", [](const Tensor& t) { return t.shape(); })
      .def_property_readonly("data_ptr",
                             [](const Tensor& t) { return uintptr_t(t.impl()->storage->data); })
      .def("numpy", &to_array);
  m.def("borrow", &borrow, py::arg("ptr"), py::arg("dtype"), py::arg("shape"), py::arg("owner"),
        "A tensor over memory `owner` holds (a torch tensor), kept alive while it is.");

  py::class_<step::Accumulation, std::shared_ptr<step::Accumulation>>(
      m, "Accumulation",
      "Gradient sums and the cycle's position (step option accumulate), shared by the "
      "TrainSteps given it.")
      .def(py::init<>())
      .def_property_readonly("calls", [](const step::Accumulation& a) { return a.calls; })
      .def(
          "sums",
          [](const step::Accumulation& a) {
            py::dict d;
            for (auto& [name, t] : step::saved_sums(a)) d[py::str(name)] = to_array(t);
            return d;
          },
          "Copies of the gradient sums, {parameter name: array}.")
      .def(
          "load",
          [](step::Accumulation& a, int64_t k, int64_t calls, const py::dict& sums) {
            std::vector<std::pair<std::string, Tensor>> grads;
            for (auto [name, v] : sums)
              grads.emplace_back(name.cast<std::string>(), from_array(v.cast<py::array>()));
            step::load_sums(a, k, calls, grads, "load_state_dict");
          },
          py::arg("accumulate"), py::arg("calls"), py::arg("sums"));

  py::class_<PyTrainStep>(m, "TrainStep")
      .def(py::init(&make_train_step), py::arg("trace"), py::arg("groups"), py::arg("options"),
           py::arg("accumulation"))
      .def(
          "run",
          [](PyTrainStep& s, const std::vector<DataArg>& data, const std::vector<double>& hypers) {
            s.source->set_hypers(hypers);
            std::vector<Tensor> tensors = data_tensors(data);
            {
              py::gil_scoped_release nogil;
              s.last = s.step.run(tensors);
            }
            return py::make_tuple(s.last.loss, s.last.skipped, s.last.step,
                                  s.last.grad_norm ? py::object(py::float_(*s.last.grad_norm))
                                                   : py::object(py::none()),
                                  s.last.updated);
          },
          py::arg("data"), py::arg("hypers"))
      .def(
          "profile",
          [](PyTrainStep& s, const std::vector<DataArg>& data, const std::vector<double>& hypers,
             int steps) {
            s.source->set_hypers(hypers);
            std::vector<Tensor> tensors = data_tensors(data);
            StepProfile p;
            {
              py::gil_scoped_release nogil;
              p = s.step.profile(tensors, steps);
            }
            py::list kernels;
            for (const KernelTime& k : p.kernels)
              kernels.append(py::make_tuple(k.name, k.calls, k.ms, k.flops));
            py::dict d;
            d["steps"] = p.steps;
            d["step_ms"] = p.step_ms;
            d["contraction_ms"] = p.contraction_ms;
            d["kernels"] = kernels;
            d["programs"] = p.program_ms;
            py::dict reorders;
            reorders["weights"] = p.weight_reorders;
            reorders["other"] = p.other_reorders;
            reorders["transposes"] = p.transposes;
            d["reorders"] = reorders;
            d["chrome_trace"] = chrome_trace(p);
            return d;
          },
          py::arg("data"), py::arg("hypers"), py::arg("steps"))
      .def(
          "floor",
          [](PyTrainStep& s, const std::vector<DataArg>& data, int rounds) {
            std::vector<Tensor> tensors = data_tensors(data);
            StepFloor f;
            {
              py::gil_scoped_release nogil;
              f = s.step.floor(tensors, rounds);
            }
            py::list parts;
            for (const FloorPart& p : f.parts)
              parts.append(py::make_tuple(p.what, p.impl, p.calls, p.ms, p.flops));
            py::dict d;
            d["ms"] = f.ms;
            d["parts"] = parts;
            return d;
          },
          py::arg("data"), py::arg("rounds"))
      .def("stats", [](const PyTrainStep& s) { return stats_dict(s.last); })
      .def("options", [](const PyTrainStep& s) { return options_dict(s.step.options()); })
      .def("gather_optimizer_state",
           [](PyTrainStep& s) {
             py::gil_scoped_release nogil;
             s.step.gather_optimizer_state();
           })
      .def("traces", [](const PyTrainStep& s) { return s.step.traces(); })
      .def("cached", [](const PyTrainStep& s) { return s.step.cached(); })
      .def("clear_cache", [](PyTrainStep& s) { s.step.clear_cache(); })
      .def("graphs_text", [](const PyTrainStep& s) { return s.step.graphs_text(); })
      .def("programs_text", [](const PyTrainStep& s) { return s.step.programs_text(); })
      .def("partition_report", [](const PyTrainStep& s) { return s.step.partition_report(); })
      .def("gradients",
           [](const PyTrainStep& s) {
             py::dict d;
             for (auto& [name, t] : s.step.gradients()) d[py::str(name)] = to_array(t);
             return d;
           })
      .def("bound_storage", [](const PyTrainStep& s) {
        std::vector<std::pair<std::string, uintptr_t>> out;
        for (auto& [name, ptr] : s.step.bound_storage()) out.emplace_back(name, uintptr_t(ptr));
        return out;
      });

  py::class_<PyForward>(m, "Forward")
      .def(py::init([](py::object trace) {
             return PyForward{
                 step::StepFactory::forward(std::make_unique<PyForwardSource>(std::move(trace)))};
           }),
           py::arg("trace"))
      .def(
          "run",
          [](PyForward& f, const std::vector<DataArg>& data) {
            std::vector<Tensor> tensors = data_tensors(data);
            Tensor out;
            {
              py::gil_scoped_release nogil;
              out = f.forward.run(tensors);
            }
            return to_array(out);
          },
          py::arg("data"))
      .def("traces", [](const PyForward& f) { return f.forward.traces(); })
      .def("graph_text", [](const PyForward& f) { return f.forward.graph_text(); });

  m.def("step_option_schema", &option_schema,
        "Each step option (include/wholestep/step_options.def): name, kind, default, least, "
        "most, choices, needs, allowed, meaning.");
  m.def(
      "step_options", [](const py::dict& d) { return options_dict(step_options(d)); },
      py::arg("options"),
      "Every step option, those of `options` set and checked as a TrainStep checks them.");
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
  m.def(
      "manual_seed",
      [](uint64_t seed) {
        ws::set_random_stream({seed, 0});
      },
      py::arg("seed"),
      "Restarts the counter-based stream that dropout's masks and a forward's random numbers "
      "come from at (seed, 0).");
  m.def("num_threads", &num_threads);
  m.def("backend_info", &backend_info);
  // The process group: joined (MPI initialized) when an MPI launcher
  // started more than one process, or when a data-parallel step compiles.
  m.def("process_group", [] {
    if (dist::launched_world_size() > 1) dist::init();
    return py::make_tuple(dist::rank(), dist::world_size());
  });
}

}  // namespace ws::frontend::torch
