#include "step/option_doc.hpp"

#include <fmt/format.h>

#include "ir/op_doc.hpp"
#include "wholestep/error.hpp"

namespace ws::step {

StepOptionValue option_default(const StepOptionInfo& info) {
  return get_step_option(StepOptions{}, info.name);
}

std::string option_flag(const StepOptionInfo& info) {
  std::string name(info.name);
  for (char& c : name)
    if (c == '_') c = '-';
  const bool turns_off = info.kind == StepOptionKind::flag && std::get<bool>(option_default(info));
  return (turns_off ? "--no-" : "--") + name;
}

std::string_view option_value_name(const StepOptionInfo& info) {
  switch (info.kind) {
    case StepOptionKind::flag: return "";
    case StepOptionKind::integer: return "N";
    case StepOptionKind::number: return "X";
    case StepOptionKind::choice: return "NAME";
  }
  return "";
}

std::string option_help(const StepOptionInfo& info) {
  std::string help(info.meaning);
  if (option_flag(info).starts_with("--no-"))
    help = fmt::format("{} (on unless given): {}", info.name, help);
  if (!info.needs.empty())
    help = fmt::format("{}: {}", option_flag(step_option_info(info.needs)), help);
  return help;
}

std::string python_literal(const StepOptionValue& v) {
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "True" : "False";
  if (const std::string* s = std::get_if<std::string>(&v)) return "'" + *s + "'";
  if (const double* d = std::get_if<double>(&v)) {
    std::string text = fmt::format("{}", *d);  // shortest: "0", "0.5", "1e+20"
    return text.find_first_of(".e") == std::string::npos ? text + ".0" : text;
  }
  return step_option_text(v);
}

std::string allowed_values(const StepOptionInfo& info, bool python) {
  switch (info.kind) {
    case StepOptionKind::flag: return python ? "a bool" : "true or false";
    case StepOptionKind::integer:
      return fmt::format("{} from {} to {}", python ? "an int" : "an integer", int64_t(info.least),
                         integer_most(info));
    case StepOptionKind::number: return fmt::format("a finite number >= {}", info.least);
    case StepOptionKind::choice: {
      const std::string_view quote = python ? "'" : "";
      std::string out;
      for (size_t i = 0; i < info.choices.size(); ++i)
        out += fmt::format("{}{}{}{}",
                           i == 0                         ? ""
                           : i + 1 == info.choices.size() ? " or "
                                                          : ", ",
                           quote, info.choices[i], quote);
      return out;
    }
  }
  return "?";
}

std::string python_allowed(const StepOptionInfo& info) { return allowed_values(info, true); }

std::string flag_table_markdown() {
  std::string out =
      "| option | default | meaning |\n"
      "|---|---|---|\n";
  for (const StepOptionInfo& info : step_option_infos()) {
    const std::string_view value = option_value_name(info);
    const StepOptionValue d = option_default(info);
    const std::string shown = info.kind == StepOptionKind::flag
                                  ? std::string(std::get<bool>(d) ? "on" : "off")
                                  : fmt::format("`{}`", step_option_text(d));
    out += fmt::format("| `{}{}{}` | {} | {} |\n", option_flag(info), value.empty() ? "" : " ",
                       value, shown, ir::table_cell(option_help(info)));
  }
  return out;
}

std::string keyword_table_markdown() {
  std::string out =
      "| keyword | default | values | meaning |\n"
      "|---|---|---|---|\n";
  for (const StepOptionInfo& info : step_option_infos()) {
    std::string meaning = ir::table_cell(info.meaning);
    if (!info.needs.empty()) meaning = fmt::format("with `{}=True`: {}", info.needs, meaning);
    out +=
        fmt::format("| `{}` | `{}` | {} | {} |\n", info.name, python_literal(option_default(info)),
                    ir::table_cell(python_allowed(info)), meaning);
  }
  return out;
}

std::string with_current_option_tables(std::string_view page) {
  std::string out(page);
  bool any = false;
  if (ir::has_line(out, kFlagTableBegin)) {
    out = ir::with_generated_part(out, kFlagTableBegin, kFlagTableEnd, flag_table_markdown(),
                                  "the step flags' table");
    any = true;
  }
  if (ir::has_line(out, kKeywordTableBegin)) {
    out = ir::with_generated_part(out, kKeywordTableBegin, kKeywordTableEnd,
                                  keyword_table_markdown(), "the step keywords' table");
    any = true;
  }
  if (!any)
    throw Error(fmt::format("the page has neither a line '{}' nor a line '{}' opening a table",
                            kFlagTableBegin, kKeywordTableBegin));
  return out;
}

}  // namespace ws::step
