// The step options (wholestep/step_options.def) as the command line and
// the Python package spell them, and the tables of docs/cli.md and
// docs/pytorch.md generated from them (build/gen_options_doc; a test
// fails when a page's table is stale, as for docs/ops.md).
#pragma once

#include <string>
#include <string_view>

#include "wholestep/step_options.hpp"

namespace ws::step {

// An option's default, as the docs show it: "true", "8", "single_graph".
StepOptionValue option_default(const StepOptionInfo& info);

// The command line's flag for an option: its name with '-' for '_' after
// "--" ("--memory-budget"); a flag option's is the one that changes its
// default ("--zero", "--no-fuse").
std::string option_flag(const StepOptionInfo& info);
// What the flag's value is called in --help and the docs: "N" (integer),
// "X" (number), "NAME" (choice); "" for a flag option.
std::string_view option_value_name(const StepOptionInfo& info);

// The flag's help (--help and docs/cli.md): the option's meaning, after
// the flag it needs ("--data-parallel: ...") and, for a flag that turns an
// option off, what it turns off ("fuse (on unless given): ...").
std::string option_help(const StepOptionInfo& info);

// A value as Python writes it: True, 8, 0.5, 'single_graph'.
std::string python_literal(const StepOptionValue& v);
// What a value of the option must be, as the library and the command line
// spell it (step_option_allowed: "true or false", "an integer from 0 to
// 2147483647", "a finite number >= 0", "error, skip or ignore") or as
// Python does (`python`: "a bool", "an int from 0 to 2147483647", "a
// finite number >= 0", "'error', 'skip' or 'ignore'").
std::string allowed_values(const StepOptionInfo& info, bool python);
// What a Python value of the option must be: "a bool", "an int from 0 to
// 2147483647", "a finite number >= 0", "'error', 'skip' or 'ignore'".
std::string python_allowed(const StepOptionInfo& info);

// The lines around the generated tables.
inline constexpr std::string_view kFlagTableBegin =
    "<!-- step flags: generated from include/wholestep/step_options.def by build/gen_options_doc; "
    "do not edit -->";
inline constexpr std::string_view kFlagTableEnd = "<!-- end of step flags -->";
inline constexpr std::string_view kKeywordTableBegin =
    "<!-- step keywords: generated from include/wholestep/step_options.def by "
    "build/gen_options_doc; do not edit -->";
inline constexpr std::string_view kKeywordTableEnd = "<!-- end of step keywords -->";

// docs/cli.md's table: a row per option (flag, default, meaning).
std::string flag_table_markdown();
// docs/pytorch.md's table: a row per option (keyword, default, values,
// meaning).
std::string keyword_table_markdown();

// `page` with each generated table it holds (the flags', the keywords')
// made current. A page holding neither, or a table's opening line without
// its closing one, is a ws::Error.
std::string with_current_option_tables(std::string_view page);

}  // namespace ws::step
