#include "step_flags.hpp"

#include <type_traits>

#include <fmt/format.h>

#include "options.hpp"
#include "step/option_doc.hpp"
#include "wholestep/dist.hpp"

namespace cli {

using ws::StepOptionInfo;

void add_step_flags(CLI::App* app, ws::StepOptions& o, std::string& comm_progress, bool with_mode) {
  ws::for_each_step_option(o, [&](const StepOptionInfo& info, auto& field) {
    using T = std::decay_t<decltype(field)>;
    if (!with_mode && info.name == "mode") return;
    const std::string flag = ws::step::option_flag(info), help = ws::step::option_help(info);
    if constexpr (std::is_same_v<T, bool>) {
      app->add_flag_callback(
          flag, [&field, set = !field] { field = set; }, help);
    } else if constexpr (std::is_integral_v<T>) {
      add_integer(app, flag, field, help, int64_t(info.least))->capture_default_str();
    } else if constexpr (std::is_floating_point_v<T>) {
      app->add_option(flag, field, help)->capture_default_str();
    } else {
      app->add_option_function<std::string>(
             flag,
             [&o, info, flag](const std::string& name) {
               if (!ws::step_option_fits(info, name))
                 throw UsageError(
                     fmt::format("{} {}: must be {}", flag, name, ws::step_option_allowed(info)));
               ws::set_step_option(o, info.name, name);
             },
             help)
          ->default_str(ws::step_option_text(ws::get_step_option(o, info.name)));
    }
  });
  app->add_option("--comm-progress", comm_progress,
                  "--data-parallel: what moves a reduction while the step computes: kernels "
                  "(tests between kernels), thread (a thread of its own) or wait (only waiting)")
      ->capture_default_str();
}

void check_step_flags(const CLI::App* app, const ws::StepOptions& o,
                      const std::string& comm_progress) {
  auto given = [&](const std::string& flag) {
    const CLI::Option* opt = app->get_option_no_throw(flag);
    return opt && opt->count() > 0;
  };
  for (const StepOptionInfo& info : ws::step_option_infos()) {
    const std::string flag = ws::step::option_flag(info);
    if (!given(flag)) continue;
    const ws::StepOptionValue value = ws::get_step_option(o, info.name);
    require(ws::step_option_fits(info, value), flag.c_str(), ws::step_option_text(value),
            fmt::format("must be {}", ws::step_option_allowed(info)).c_str());
    if (!info.needs.empty() && !std::get<bool>(ws::get_step_option(o, info.needs)))
      throw UsageError(fmt::format("{} needs {}", flag,
                                   ws::step::option_flag(ws::step_option_info(info.needs))));
  }
  if (given("--comm-progress") && !o.data_parallel)
    throw UsageError("--comm-progress needs --data-parallel");
  require(comm_progress == "kernels" || comm_progress == "thread" || comm_progress == "wait",
          "--comm-progress", comm_progress, "expected kernels, thread or wait");
  try {
    ws::check_step_options(o);
  } catch (const ws::Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace cli
