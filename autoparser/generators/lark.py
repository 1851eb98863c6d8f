"""Lark grammar of a model's output language, and a parser built on it.

The grammar is the output language the parser reads (`language.build` with `reading` on:
what generation writes and what the lenient parser also accepts), written for Lark by
`lark_ir.write_lark`. It is plain text a user can print, diff, store and load with
``Lark(text, parser="earley", lexer="dynamic")``; `parse_with_lark` parses with it and builds
the message from the language's capture roles, as the parser builds it.

Output outside the language makes `parse_with_lark` raise, where the parser recovers (invalid
JSON, unknown tool names, truncated calls).
"""

from __future__ import annotations

from typing import Any

from autoparser.analysis import Analysis
from autoparser.generators.lark_ir import LarkLanguage, read_message, write_lark
from autoparser.language.build import Request, build_language

__all__ = ["generate_lark", "parse_with_lark", "reading_grammar"]

CDATA = ("<![CDATA[", "]]>")


def reading_grammar(analysis: Analysis, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None,
                    parallel_tool_calls: bool = True, tool_choice: Any = "auto",
                    response_format: Any = None) -> LarkLanguage:
    """The output language the parser reads for this request, written for Lark.

    `tools` restricts tool names to the given tools (None or empty: any name); `thinking`
    selects the thinking mode as in `Analysis.thinking_enabled`; `tool_choice` is the OpenAI
    request field: "none" leaves calls out, "required" makes one necessary, a named function
    is the only name allowed; `response_format` asking for JSON lets the answer be that JSON in a
    code fence."""
    request = Request(tools=tuple(tools or ()), tool_choice=tool_choice, thinking=thinking,
                      parallel_tool_calls=parallel_tool_calls, lazy=False, reading=True,
                      response_format=response_format)
    return write_lark(build_language(analysis, request), end_of_turn=tuple(analysis.stop))


def generate_lark(analysis: Analysis, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None,
                  parallel_tool_calls: bool = True, tool_choice: Any = "auto") -> str:
    """The Lark grammar text of the output language (see `reading_grammar`)."""
    return reading_grammar(analysis, tools, thinking, parallel_tool_calls, tool_choice).grammar


def parse_with_lark(analysis: Analysis, text: str, tools: list[dict[str, Any]] | None = None,
                    thinking: bool | None = None, parallel_tool_calls: bool = True,
                    tool_choice: Any = "auto", response_format: Any = None) -> dict[str, Any]:
    """Parse model output with the Lark grammar and build the OpenAI assistant message.

    Raises `lark.exceptions.UnexpectedInput` when `text` is not in the grammar's language.
    Reasoning and content are returned with surrounding whitespace removed, None when empty.
    """
    written = reading_grammar(analysis, tools, thinking, parallel_tool_calls, tool_choice, response_format)
    return read_message(written, text)
