// How a training step is compiled and run: ws::StepOptions, declared once
// by the table step_options.def, with what the command line, the Python
// package and the docs need to know of each field (its kind, range,
// meaning) and to set it by name.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace ws {

enum class StepMode {
  interpret,     // the step graph node by node on reference kernels (the oracle)
  three_graph,   // forward, backward and optimizer Programs, as AOTAutograd + eager optimizer
  single_graph,  // one Program: forward, backward and updates together
};
// StepMode's names, in its order.
inline constexpr std::array<const char*, 3> kStepModeNames = {"interpret", "three_graph",
                                                              "single_graph"};

const char* mode_name(StepMode m);
// Parses "interpret", "three_graph" or "single_graph"; throws ws::Error otherwise.
StepMode parse_mode(const std::string& s);

// What a step does when its loss (or, skipping, any gradient element) is
// inf or NaN.
enum class NonFinite {
  // TrainStep::run throws a ws::Error naming the step, after the step ran
  // (its update is applied, as PyTorch's would be; the error makes it seen).
  error,
  // Decided inside the step graph before any in-place write: the update
  // writes back what it read, so parameters, optimizer state, buffers and
  // the random stream stay bit-identical, the optimizer's step count does
  // not advance, and StepResult::skipped says so. Costs a pass over the
  // gradients.
  skip,
  // Nothing is checked.
  ignore,
};
// NonFinite's names, in its order.
inline constexpr std::array<const char*, 3> kNonFiniteNames = {"error", "skip", "ignore"};

// How the compiled step stores the images of its convolutions, and the
// values that flow between them (src/lower/assign_layouts.hpp).
enum class ImageLayouts {
  nchw,           // as PyTorch does: [N, C, H, W]
  channels_last,  // [N, H, W, C]
  blocked,        // oneDNN's blocks of 16 channels (8 where 16 does not divide them)
};
// ImageLayouts' names, in its order.
inline constexpr std::array<const char*, 3> kImageLayoutsNames = {"nchw", "channels_last",
                                                                  "blocked"};

// The fields, their defaults and meanings: step_options.def.
struct StepOptions {
#define WS_STEP_OPTION(type, name, value, least, needs, meaning) type name = value;
#include "wholestep/step_options.def"
#undef WS_STEP_OPTION
};

// ---- each option by name: for the command line, Python and the docs ------

enum class StepOptionKind {
  flag,     // bool
  integer,  // an integer in [least, most]
  number,   // a finite double >= least
  choice,   // an enum: one of `choices`
};

struct StepOptionInfo {
  std::string_view name;  // the field's: "memory_budget"
  StepOptionKind kind;
  double least = 0;                      // integer, number: the smallest value allowed
  double most = 0;                       // integer: the largest its type holds
  std::span<const char* const> choices;  // choice: the names of the enum's values, in order
  std::string_view needs;                // the flag option without which it has no effect, or ""
  std::string_view meaning;              // one line
};

namespace detail {

template <class T>
constexpr std::span<const char* const> choice_names() {
  if constexpr (std::is_same_v<T, StepMode>)
    return kStepModeNames;
  else if constexpr (std::is_same_v<T, NonFinite>)
    return kNonFiniteNames;
  else if constexpr (std::is_same_v<T, ImageLayouts>)
    return kImageLayoutsNames;
  else
    return {};
}

template <class T>
constexpr StepOptionInfo step_option_info(std::string_view name, double least,
                                          std::string_view needs, std::string_view meaning) {
  if constexpr (std::is_same_v<T, bool>) {
    return {name, StepOptionKind::flag, 0, 0, {}, needs, meaning};
  } else if constexpr (std::is_integral_v<T>) {
    return {
        name,   StepOptionKind::integer, least, double(std::numeric_limits<T>::max()), {}, needs,
        meaning};
  } else if constexpr (std::is_floating_point_v<T>) {
    return {
        name,   StepOptionKind::number, least, std::numeric_limits<double>::infinity(), {}, needs,
        meaning};
  } else {
    static_assert(std::is_enum_v<T> && !choice_names<T>().empty(),
                  "a step option is a bool, an integer, a double or an enum with names");
    return {name, StepOptionKind::choice, 0, 0, choice_names<T>(), needs, meaning};
  }
}

}  // namespace detail

// Calls f(info, field) for each field of `o` (a StepOptions, const or
// not), in the struct's order, the field by reference with its own type.
template <class Options, class F>
requires std::same_as<std::remove_const_t<Options>, StepOptions>
void for_each_step_option(Options& o, F&& f) {
#define WS_STEP_OPTION(type, name, value, least, needs, meaning) \
  f(detail::step_option_info<type>(#name, least, needs, meaning), o.name);
#include "wholestep/step_options.def"
#undef WS_STEP_OPTION
}

// Every option's description, in the struct's order.
std::vector<StepOptionInfo> step_option_infos();
// Option `name`'s; a ws::Error naming the options for an unknown name.
StepOptionInfo step_option_info(std::string_view name);

// An option's value, as a frontend holds it: a flag's bool, an integer, a
// number, a choice's name.
using StepOptionValue = std::variant<bool, int64_t, double, std::string>;

// Option `name` of `o`; a ws::Error naming the options for an unknown name.
StepOptionValue get_step_option(const StepOptions& o, std::string_view name);
// Sets option `name` of `o`. A value of another kind (a number for a flag,
// a fraction for an integer; an integer is a number too) or out of range
// (step_option_allowed) is a ws::Error naming the option, the value and
// what it must be; an unknown name, one naming every option.
void set_step_option(StepOptions& o, std::string_view name, const StepOptionValue& v);
// The value as the docs and `--help` show it: "true", "0.5", "single_graph".
std::string step_option_text(const StepOptionValue& v);
// What a value of the option must be, as an error says: "true or false",
// "an integer from 0 to 2147483647", "a finite number >= 0",
// "interpret, three_graph or single_graph".
std::string step_option_allowed(const StepOptionInfo& info);

// An integer option's largest value (`most`, which a double holds only
// approximately for int64_t).
int64_t integer_most(const StepOptionInfo& info);

// Whether `value` is allowed for `info` (an integer within range, a number
// finite and >= least, a choice's name).
bool step_option_fits(const StepOptionInfo& info, const StepOptionValue& value);

// What a TrainStep checks of its options before anything else: every value
// in its range, no option set (away from its default) while the option it
// needs is off, detect_anomaly only when interpreted. A ws::Error naming
// the options otherwise.
void check_step_options(const StepOptions& o);

}  // namespace ws
