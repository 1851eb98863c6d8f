"""A readable summary of an analysis for `autoparser analyze`.

Uses `rich` for a table when it is installed (it comes with the `server` extra); plain aligned
text otherwise, so the core install stays at jinja2 and lark.
"""

from __future__ import annotations

import json

from autoparser.analysis import Analysis
from autoparser.tool_calls import JsonCalls, TagCalls, TaggedArguments


def summary_rows(analysis: Analysis) -> list[tuple[str, str]]:
    r, c, t = analysis.reasoning, analysis.content, analysis.tools
    rows = [("generation prompt", _show(analysis.generation_prompt))]
    if r.mode == "none":
        rows.append(("reasoning", "none"))
    else:
        mode = "forced open when thinking" if r.forced_open else "optional"
        rows.append(("reasoning", f"{_show(r.start)} … {_show(r.end)} ({mode})"))
        if r.toggle:
            default = "on" if r.default_on else "off"
            rows.append(("thinking switch", f"{r.toggle} = {json.dumps(r.toggle_on)} / "
                                            f"{json.dumps(r.toggle_off)} (default {default})"))
    if c.mode == "plain":
        rows.append(("content", "plain"))
    else:
        rows.append(("content", f"{_show(c.start)} … {_show(c.end)} ({c.mode})"))
    if not t.supported:
        rows.append(("tool calls", "not supported"))
    else:
        source = " (from the instructions' example)" if t.from_instructions else ""
        rows.append(("tool calls", f"{t.format}{', parallel' if t.parallel else ', one at a time'}{source}"))
        rows.append(("tool call layout", _layout(analysis)))
    m = analysis.messages
    if m.body_start:
        headers = f"reasoning {_show(m.reasoning_header.strip())}, answer {_show(m.content_header.strip())}"
        if m.call_header:
            headers += f", call {_show(m.call_header.strip().replace('{name}', 'NAME'))}"
        rows.append(("messages", f"HEADER {_show(m.body_start)} … {_show(m.separator)} HEADER …; {headers}"))
    rows.append(("end of turn", ", ".join(_show(s) for s in analysis.stop) or "-"))
    rows.append(("triggers", ", ".join(_show(s) for s in analysis.triggers) or "-"))
    rows.append(("preserved tokens", " ".join(analysis.preserved_tokens) or "-"))
    for warning in analysis.warnings:
        rows.append(("warning", warning))
    return rows


def _layout(analysis: Analysis) -> str:
    markers, calls = analysis.tools.markers, analysis.tools.calls
    if isinstance(calls, JsonCalls):
        fields = {calls.name_field: "NAME", calls.args_field: "{ARGS}"}
        if calls.id_field:
            fields[calls.id_field] = "ID"
        body = json.dumps({calls.function_field: fields} if calls.function_field else fields)
        call = markers.call_start + body + markers.call_end
        if calls.array:
            call = "[" + call + markers.call_separator + "…]"
    elif isinstance(calls, TagCalls):
        name = calls.name.start + ("ID(NAME)" if calls.name.in_id else "NAME") + calls.name.end
        if calls.id:
            ident = calls.id.start + "ID" + calls.id.end
            name = ident + name if calls.id.before_name else name + ident
        args = calls.arguments
        if isinstance(args, TaggedArguments):
            written = args.start + "KEY" + args.key_end + "VALUE" + args.end + "…"
        else:
            written = args.start + "{ARGS}" + args.end
        call = markers.call_start + name + written + markers.call_end
    else:
        call = ""
    return _show(markers.section_start + call + markers.section_end)


def _show(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1] if text else "-"


def print_summary(analysis: Analysis, name: str | None = None) -> None:
    rows = summary_rows(analysis)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max(len(k) for k, _ in rows)
        if name:
            print(name)
        for key, value in rows:
            print(f"  {key.ljust(width)}  {value}")
        return
    from rich.text import Text

    table = Table(title=Text(name) if name else None, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(Text(key), Text(value), style="yellow" if key == "warning" else None)
    Console().print(table)
