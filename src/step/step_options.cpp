// The step options by name (wholestep/step_options.hpp): every frontend
// sets and checks them here, from the one table step_options.def.
#include "wholestep/step_options.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "step/option_doc.hpp"
#include "wholestep/error.hpp"

namespace ws {

const char* mode_name(StepMode m) {
  const size_t i = size_t(m);
  return i < kStepModeNames.size() ? kStepModeNames[i] : "?";
}

StepMode parse_mode(const std::string& s) {
  for (size_t i = 0; i < kStepModeNames.size(); ++i)
    if (s == kStepModeNames[i]) return StepMode(i);
  throw Error(
      fmt::format("unknown step mode '{}': expected interpret, three_graph or single_graph", s));
}

namespace {

std::string all_names() {
  std::vector<std::string_view> names;
  for (const StepOptionInfo& info : step_option_infos()) names.push_back(info.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

[[noreturn]] void unknown(std::string_view name) {
  throw Error(fmt::format("unknown step option '{}'; the step options are {}", name, all_names()));
}

[[noreturn]] void not_allowed(const StepOptionInfo& info, const StepOptionValue& v) {
  const std::string text = step_option_text(v);
  throw Error(fmt::format("step option {}={}: must be {}", info.name,
                          std::holds_alternative<std::string>(v) ? "'" + text + "'" : text,
                          step_option_allowed(info)));
}

// The value of `field` as a frontend holds it.
template <class T>
StepOptionValue value_of(const T& field) {
  if constexpr (std::is_same_v<T, bool>)
    return field;
  else if constexpr (std::is_integral_v<T>)
    return int64_t(field);
  else if constexpr (std::is_floating_point_v<T>)
    return double(field);
  else
    return std::string(detail::choice_names<T>()[size_t(field)]);
}

// `v` (step_option_fits) into `field`.
template <class T>
void assign(T& field, const StepOptionValue& v) {
  if constexpr (std::is_same_v<T, bool>) {
    field = std::get<bool>(v);
  } else if constexpr (std::is_integral_v<T>) {
    field = T(std::get<int64_t>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    field = std::holds_alternative<double>(v) ? std::get<double>(v) : double(std::get<int64_t>(v));
  } else {
    const auto names = detail::choice_names<T>();
    field = T(std::find(names.begin(), names.end(), std::get<std::string>(v)) - names.begin());
  }
}

}  // namespace

int64_t integer_most(const StepOptionInfo& info) {
  // 2^63 - 1 as a double is 2^63, past what int64_t holds.
  return info.most >= 0x1p63 ? std::numeric_limits<int64_t>::max() : int64_t(info.most);
}

std::vector<StepOptionInfo> step_option_infos() {
  std::vector<StepOptionInfo> out;
  StepOptions o;
  for_each_step_option(o, [&](const StepOptionInfo& info, auto&) { out.push_back(info); });
  return out;
}

StepOptionInfo step_option_info(std::string_view name) {
  for (const StepOptionInfo& info : step_option_infos())
    if (info.name == name) return info;
  unknown(name);
}

StepOptionValue get_step_option(const StepOptions& o, std::string_view name) {
  std::optional<StepOptionValue> out;
  for_each_step_option(o, [&](const StepOptionInfo& info, const auto& field) {
    if (info.name == name) out = value_of(field);
  });
  if (!out) unknown(name);
  return *out;
}

void set_step_option(StepOptions& o, std::string_view name, const StepOptionValue& v) {
  bool found = false;
  for_each_step_option(o, [&](const StepOptionInfo& info, auto& field) {
    if (info.name != name) return;
    found = true;
    if (!step_option_fits(info, v)) not_allowed(info, v);
    assign(field, v);
  });
  if (!found) unknown(name);
}

std::string step_option_text(const StepOptionValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return x;
        else
          return fmt::format("{}", x);
      },
      v);
}

std::string step_option_allowed(const StepOptionInfo& info) {
  return step::allowed_values(info, /*python=*/false);
}

bool step_option_fits(const StepOptionInfo& info, const StepOptionValue& v) {
  switch (info.kind) {
    case StepOptionKind::flag: return std::holds_alternative<bool>(v);
    case StepOptionKind::integer: {
      const int64_t* i = std::get_if<int64_t>(&v);
      return i && double(*i) >= info.least && double(*i) <= info.most;
    }
    case StepOptionKind::number: {
      if (const int64_t* i = std::get_if<int64_t>(&v)) return double(*i) >= info.least;
      const double* d = std::get_if<double>(&v);
      return d && std::isfinite(*d) && *d >= info.least;
    }
    case StepOptionKind::choice: {
      const std::string* s = std::get_if<std::string>(&v);
      return s && std::find(info.choices.begin(), info.choices.end(), *s) != info.choices.end();
    }
  }
  return false;
}

void check_step_options(const StepOptions& o) {
  const StepOptions defaults;
  for_each_step_option(o, [&](const StepOptionInfo& info, const auto& field) {
    if (!step_option_fits(info, value_of(field))) not_allowed(info, value_of(field));
    if (info.needs.empty() || value_of(field) == get_step_option(defaults, info.name)) return;
    if (!std::get<bool>(get_step_option(o, info.needs)))
      throw Error(fmt::format("step option {}={} needs {}: it has no effect without it", info.name,
                              step_option_text(value_of(field)), info.needs));
  });
  if (o.detect_anomaly && o.mode != StepMode::interpret)
    throw Error(
        fmt::format("step option detect_anomaly checks every value of the interpreted step graph; "
                    "it needs mode interpret, not {}",
                    mode_name(o.mode)));
}

}  // namespace ws
