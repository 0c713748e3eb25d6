"""The step options are declared once (include/wholestep/step_options.def),
and everything that offers them agrees with that declaration: the C++
struct's defaults (as the extension module reads them), the keyword
arguments of compile_train_step, the options a compiled step runs with,
and the generated tables of docs/pytorch.md and docs/cli.md: every option
reachable from each, with the same default. (The command line's flags:
tests/tools/step_flags_test.cpp and tests/docs/step_options_page_test.cpp.)"""

import ast
import os
import re

import pytest
import torch

import wholestep
import wholestep.torch as wst
from wholestep import _C

F = torch.nn.functional
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCHEMA = wst.step_options()


def other_value(option):
    """An allowed value of `option` other than its default."""
    d = option["default"]
    if option["kind"] == "flag":
        return not d
    if option["kind"] == "integer":
        return d + 3
    if option["kind"] == "number":
        return d + 0.25
    return next(c for c in option["allowed"].replace("'", "").replace(" or ", ", ").split(", ")
                if c != d)


def setting(option):
    """The keywords that set `option` away from its default, with what it
    needs to take effect."""
    kwargs = {option["name"]: other_value(option)}
    if option["needs"]:
        kwargs[option["needs"]] = True
    if option["name"] == "detect_anomaly":
        kwargs["mode"] = "interpret"
    return kwargs


def compiled(**kwargs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wst.compile_train_step(model, opt, F.cross_entropy, **kwargs)
    step(torch.randn(4, 6), torch.randint(0, 3, (4,)))
    return step


def test_the_schema_is_the_structs_and_every_option_has_a_default():
    names = [o["name"] for o in SCHEMA]
    assert len(names) == len(set(names)) >= 14
    assert names[0] == "mode"
    defaults = {o["name"]: o["default"] for o in SCHEMA}
    assert _C.step_options({}) == defaults
    assert defaults["mode"] == "single_graph" and defaults["fuse"] is True
    assert defaults["bucket_bytes"] == 64 << 10
    for o in SCHEMA:
        assert o["meaning"] and "\n" not in o["meaning"], o["name"]
        assert o["needs"] in ("", *names), o["name"]


def test_a_step_made_without_options_runs_with_the_structs_defaults():
    step = compiled()
    defaults = {o["name"]: o["default"] for o in SCHEMA}
    assert step.options() == defaults
    # What the compiled step holds (the C++ TrainStep's options): a
    # non-finite loss is reported by the package, the step ignores it.
    assert step._last.step.options() == dict(defaults, on_nonfinite="ignore")


@pytest.mark.parametrize("option", SCHEMA, ids=[o["name"] for o in SCHEMA])
def test_each_option_is_a_keyword_that_reaches_the_compiled_step(option):
    kwargs = setting(option)
    name, value = option["name"], kwargs[option["name"]]
    step = compiled(**kwargs)
    expected = {o["name"]: o["default"] for o in SCHEMA}
    expected.update(kwargs)
    assert step.options() == expected
    held = step._last.step.options()
    if name != "on_nonfinite":
        assert held[name] == value and type(held[name]) is type(value), (held[name], value)
    assert {k: v for k, v in held.items() if k != "on_nonfinite"} == \
        {k: v for k, v in expected.items() if k != "on_nonfinite"}


def generated_rows(page, begin):
    """The rows of the table after the line starting `begin` in `page`."""
    text = open(os.path.join(ROOT, "docs", page)).read()
    table = text[text.index(begin):].split("<!-- end of ")[0]
    return [[cell.strip() for cell in line.strip("|").split(" | ")]
            for line in table.splitlines()[3:] if line.startswith("| ")]


def test_the_keyword_table_of_pytorch_md_has_every_option_with_its_default():
    rows = generated_rows("pytorch.md", "<!-- step keywords:")
    assert [r[0].strip("`") for r in rows] == [o["name"] for o in SCHEMA]
    for row, o in zip(rows, SCHEMA):
        shown = ast.literal_eval(row[1].strip("`"))
        assert shown == o["default"] and type(shown) is type(o["default"]), (row, o)
        assert row[2] == o["allowed"], (row, o)


def test_the_flag_table_of_cli_md_has_a_flag_for_every_option_with_its_default():
    rows = generated_rows("cli.md", "<!-- step flags:")
    assert len(rows) == len(SCHEMA)
    for row, o in zip(rows, SCHEMA):
        flag = re.match(r"`(--[a-z-]+)", row[0]).group(1)
        dashed = o["name"].replace("_", "-")
        if o["kind"] == "flag":
            assert flag == ("--no-" if o["default"] else "--") + dashed, (row, o)
            assert row[1] == ("on" if o["default"] else "off"), (row, o)
        else:
            assert flag == "--" + dashed, (row, o)
            assert row[1] == f"`{o['default']:g}`" if o["kind"] == "number" \
                else row[1] == f"`{o['default']}`", (row, o)


@pytest.mark.parametrize("options,message", [
    ({"fusion": True}, r"compile_train_step: unknown option 'fusion'; the options are "
                       r"accumulate, adapt_threads, aliasing, bucket_bytes, data_parallel, "
                       r"detect_anomaly, fuse, layouts, max_cached, memory_budget, mode, "
                       r"on_nonfinite"),
    ({"memory_budget": -1}, r"step option memory_budget=-1: must be a finite number >= 0"),
    ({"bucket_bytes": 0, "data_parallel": True},
     r"step option bucket_bytes=0: must be an integer from 1 to 9223372036854775807"),
    ({"zero": True}, r"step option zero=true needs data_parallel"),
    ({"detect_anomaly": True}, r"it needs mode interpret, not single_graph"),
    ({"mode": "fast"}, r"option mode='fast' \(str\); it must be 'interpret', 'three_graph' or "
                       r"'single_graph'"),
    ({"adapt_threads": 0}, r"option adapt_threads=0 \(int\); it must be a bool"),
], ids=["unknown", "range", "integer_range", "needs", "anomaly", "choice", "bool"])
def test_wrong_options_name_the_option_and_what_it_takes(options, message):
    with pytest.raises(wholestep.Error, match=message):
        compiled(**options)
