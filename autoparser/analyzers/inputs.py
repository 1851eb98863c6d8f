"""Template variables beyond the conversation that a template cannot render without.

Some templates print a variable nobody standard passes (`'\\n' + functions`, `'Today is ' + date`)
and fail with "'X' is undefined" when it is missing. Each such variable is found from the render
error, one at a time, and given text; a variable that carries the tool definitions (its name
speaks of tools or functions, or it is the only one, and the template never prints `tools`
itself) is given them as JSON text, kept only where the prompt then shows the probe tools.

A template may also write tool calls only in the turns it keeps for documents (a retrieval
branch taken when `documents` are passed): where no call renders without them and one does
with a document, `documents` is an input too, and every render passes one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from jinja2 import meta

from autoparser.analyzers.probes import PROBE_TOOLS, Prober
from autoparser.render import compile_template

MAX_INPUTS = 8
_UNDEFINED = re.compile(r"'([A-Za-z_]\w*)' is undefined")
_TOOL_WORDS = ("tool", "function")
DOCUMENTS = "documents"  # the variable transformers' `apply_chat_template(documents=...)` sets


def required_inputs(prober: Prober) -> dict[str, str]:
    """The variables the template needs to render a basic conversation (name -> kind, see
    `autoparser.analysis.INPUT_KINDS`); sets them on `prober`. Empty when none helps."""
    read = _variables_read(prober.source)
    inputs: dict[str, str] = {}
    for _ in range(MAX_INPUTS):
        if prober.prompt() is not None:
            break
        missing = _UNDEFINED.search(prober.errors[-1]) if prober.errors else None
        if missing is None or missing.group(1) not in read or missing.group(1) in inputs:
            return _set(prober, {})
        inputs[missing.group(1)] = "text"
        _set(prober, inputs)
    else:
        return _set(prober, {})
    carrier = _tools_carrier(prober.source, inputs)
    if carrier is not None and _shows_probe_tools(prober, {**inputs, carrier: "tools_text"}):
        inputs[carrier] = "tools_text"
    return _set(prober, inputs)


def documents_for_calls(prober: Prober, renders_a_call: Callable[[Prober], bool]) -> bool:
    """Adds `documents` to the prober's inputs where the template reads them and renders a tool
    call only with them; whether it did."""
    if DOCUMENTS in prober.inputs or DOCUMENTS not in _variables_read(prober.source) or renders_a_call(prober):
        return False
    saved = dict(prober.inputs)
    prober.inputs = {**saved, DOCUMENTS: "documents"}
    if renders_a_call(prober):
        return True
    prober.inputs = saved
    return False


def _set(prober: Prober, inputs: dict[str, str]) -> dict[str, str]:
    prober.inputs = dict(inputs)
    return prober.inputs


def _variables_read(source: str) -> set[str]:
    template = compile_template(source)
    return meta.find_undeclared_variables(template.environment.parse(source))


def _tools_carrier(source: str, inputs: dict[str, str]) -> str | None:
    if "tools" in _variables_read(source):
        return None
    named = [name for name in inputs if any(word in name.lower() for word in _TOOL_WORDS)]
    if len(named) == 1:
        return named[0]
    return next(iter(inputs)) if len(inputs) == 1 else None


def _shows_probe_tools(prober: Prober, inputs: dict[str, str]) -> bool:
    saved = prober.inputs
    prober.inputs = inputs
    try:
        prompt = prober.prompt(tools=PROBE_TOOLS) or ""
    finally:
        prober.inputs = saved
    return "first_arg" in prompt
