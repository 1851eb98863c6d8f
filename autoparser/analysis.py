"""The analysis of a chat template (`Analysis`): its data (`autoparser.analysis_data`) and what
users do with it: render the template, parse output, write grammars.

An `Analysis` is produced by `autoparser.analyzers.analyze` and consumed by the parser and the
grammar generators. Its fields, their defaults and its JSON form (`to_dict` / `from_dict`) are
those of `AnalysisData`, which the builder of the output language and the standalone generated
module read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the data's parts, read from here as well
from autoparser.analysis_data import INPUT_KINDS as INPUT_KINDS
from autoparser.analysis_data import AnalysisData
from autoparser.analysis_data import ContentAnalysis as ContentAnalysis
from autoparser.analysis_data import MessagesAnalysis as MessagesAnalysis
from autoparser.analysis_data import ReasoningAnalysis as ReasoningAnalysis
from autoparser.analysis_data import input_values as input_values
from autoparser.tool_calls import ToolsAnalysis as ToolsAnalysis


@dataclass
class Analysis(AnalysisData):
    """Everything autoparser inferred about one chat template."""

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        from autoparser.render import render_template

        return render_template(self.source, messages, tools=tools,
                               add_generation_prompt=add_generation_prompt,
                               bos_token=self.bos_token, eos_token=self.eos_token,
                               **{**self.input_kwargs(tools), **template_kwargs})

    def parser(self, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None,
               parallel_tool_calls: bool = True, tool_choice: Any = "auto",
               tool_call_policy: str = "lenient", prompt: str | None = None, response_format: Any = None):
        from autoparser.language.reading import Parser

        return Parser(self, tools=tools, thinking=thinking, parallel_tool_calls=parallel_tool_calls,
                      tool_choice=tool_choice, tool_call_policy=tool_call_policy, prompt=prompt,
                      response_format=response_format)

    def gbnf(self, tools: list[dict[str, Any]] | None = None, tool_choice: Any = "auto",
             thinking: bool | None = None, parallel_tool_calls: bool = True,
             special_tokens: set[str] | list[str] | None = None, prompt: str | None = None,
             **kwargs: Any) -> str:
        from autoparser.generators.gbnf import generate_gbnf

        return generate_gbnf(self, tools=tools, tool_choice=tool_choice, thinking=thinking,
                             parallel_tool_calls=parallel_tool_calls,
                             special_tokens=special_tokens, prompt=prompt, **kwargs)

    def lark(self, tools: list[dict[str, Any]] | None = None, thinking: bool | None = None) -> str:
        from autoparser.generators.lark import generate_lark

        return generate_lark(self, tools=tools, thinking=thinking)

