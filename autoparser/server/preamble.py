"""A system preamble that tells the model about its tools, for templates that never do.

Some chat templates render tool calls in the history but never the tool definitions, so a
model served with them cannot know which tools exist or how to call them. When the analysis
supports tool calls and a probe render shows that the template drops the `tools` it is given,
the server adds a system message listing each tool (name, description, JSON schema of its
arguments) and showing the exact call layout: an example call rendered through the model's own
template, cut out of the rendered conversation the way the round-trip check does. The wording
is general; only the rendered example comes from the template.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from autoparser.analysis import Analysis
from autoparser.roundtrip import strip_turn_end

_PROBE_NAME = "probe_tool_visibility"
_PROBE_TOOL = {"type": "function", "function": {
    "name": _PROBE_NAME, "description": "A tool used to see whether the template lists tools.",
    "parameters": {"type": "object", "properties": {"value": {"type": "string"}}}}}
_HISTORY = [{"role": "user", "content": "Hello"}]


def template_hides_tools(analysis: Analysis) -> bool:
    """Whether the template renders tool calls but drops the tool definitions it is given."""
    if not analysis.tools.supported:
        return False
    try:
        prompt = analysis.render(_HISTORY, tools=[_PROBE_TOOL], add_generation_prompt=True)
    except Exception:  # a template that refuses the probe cannot be judged: leave it alone
        return False
    return _PROBE_NAME not in prompt


def example_arguments(schema: dict[str, Any] | None) -> dict[str, Any]:
    """A small arguments object shaped like `schema`: its required properties, or the first one."""
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    names = [name for name in required if isinstance(name, str) and name in properties] \
        if isinstance(required, list) else []
    names = names or list(properties)[:1]
    return {name: _example_value(properties[name]) for name in names}


def _example_value(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "..."
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    values = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}, "null": None}
    return values.get(kind, "...") if isinstance(kind, str) else "..."


def call_layout(analysis: Analysis, tool: dict[str, Any], template_kwargs: dict[str, Any] | None = None,
                render: Callable[..., str] | None = None) -> str | None:
    """The text the model writes to call `tool`, rendered through the template (by `render`,
    default `analysis.render`); None if it cannot be cut out."""
    render = render or analysis.render
    function = tool["function"]
    arguments = example_arguments(function.get("parameters"))
    kwargs = template_kwargs or {}
    for as_text in (False, True):
        call = {"id": "call_0", "type": "function", "function": {
            "name": function["name"], "arguments": json.dumps(arguments) if as_text else arguments}}
        message = {"role": "assistant", "content": "", "tool_calls": [call]}
        try:
            base = render(_HISTORY, tools=[tool], add_generation_prompt=True, **kwargs)
            full = render([*_HISTORY, message], tools=[tool], add_generation_prompt=False, **kwargs)
        except Exception:  # some templates want arguments as text: try that next
            continue
        if full.startswith(base):
            layout = strip_turn_end(full[len(base):], analysis.stop).strip()
            if function["name"] in layout:
                return layout
    return None


def tools_preamble(analysis: Analysis, tools: list[dict[str, Any]],
                   template_kwargs: dict[str, Any] | None = None, render: Callable[..., str] | None = None) -> str:
    """The system text that lists `tools` and shows how to call them (`render`: as in `call_layout`)."""
    lines = ["You can call the following tools. Each one is given with its name, what it does, and the "
             "JSON schema of its arguments.", ""]
    for tool in tools:
        function = tool.get("function") or {}
        lines.append(f"## {function.get('name', '')}")
        if function.get("description"):
            lines.append(str(function["description"]))
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        lines.append("Arguments (JSON schema): " + json.dumps(schema, ensure_ascii=False))
        lines.append("")
    layout = next((text for tool in tools if (text := call_layout(analysis, tool, template_kwargs, render))), None)
    if layout is not None:
        lines += ["To call a tool, write the call exactly in this layout, with the tool's name and a JSON "
                  "object of its arguments (this example calls one of the tools above):", layout, ""]
        if analysis.tools.parallel:
            lines.append("To call several tools at once, write their calls one after another in the same layout.")
    lines.append("Call a tool only when it helps to answer. After a call, the results come back in the next "
                 "message; then answer the user.")
    return "\n".join(lines)


def with_preamble(messages: list[dict[str, Any]], preamble: str) -> list[dict[str, Any]]:
    """`messages` with the preamble added to the leading system message, or as a new one."""
    messages = copy.copy(messages)
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{preamble}".lstrip()
        messages[0] = first
    else:
        messages.insert(0, {"role": "system", "content": preamble})
    return messages
