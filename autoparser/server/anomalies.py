"""Protocol anomalies: what a finished reply did that the template's protocol does not expect.

Each anomaly is read from what the parser already produced for the reply (its message, the
calls it marked incomplete, the text it left as content) and from how the generation ended;
nothing here parses the model's text with rules of its own. The rules:

- `unclosed_reasoning`: the model ended its reply inside reasoning (the end marker never came,
  and neither content nor a call followed), by its own end of turn, not a limit or a stop string;
- `invalid_call`: a call whose arguments the parser had to repair, or call markup it could not
  read as a call (it left it in content, which the server then cleans);
- `cut_off_call`: the same, where `max_tokens` ended the reply;
- `unknown_tool`: call markup naming a function that is not among the request's tools (the parser
  reads only the request's tools as calls; the template's own reader, open to any name, names it);
- `text_after_calls`: under the strict policy, text after the calls, which the policy turns into
  content together with any calls after it;
- `calls_after_text`: under the strict policy, calls after text, which the policy leaves as content.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from autoparser.analysis import Analysis, ReasoningAnalysis

RULES = ("unclosed_reasoning", "invalid_call", "cut_off_call", "unknown_tool", "text_after_calls",
         "calls_after_text")


@dataclass(frozen=True)
class Anomaly:
    rule: str
    detail: str


class AnomalyFinder:
    """The anomalies of one template's replies (`find`)."""

    def __init__(self, analysis: Analysis):
        self._reasoning_end = analysis.reasoning.end
        tools = analysis.tools
        markers = (tools.markers.section_start, tools.markers.call_start) if tools.supported else ()
        self._call_openers = tuple(marker for marker in markers if marker.strip())
        # What follows reasoning, read with no tool list: it takes a call to any name.
        self._answer_analysis = dataclasses.replace(analysis, reasoning=ReasoningAnalysis())

    def find(self, prepared: Any, result: Any) -> list[Anomaly]:
        """The anomalies of a finished chat reply (`PreparedChat`, `GenerationResult`)."""
        completion = prepared.completion
        message = completion.parsed_message()
        cut = result.finish_reason == "length"
        found = self._reasoning(prepared, message, result)
        found += self._calls(message, cut)
        leftover = self._leftover_call(message.get("content"))
        if leftover:
            found += self._leftover(prepared, message, leftover, cut)
        elif prepared.tool_call_policy == "strict" and message.get("tool_calls") and message.get("content"):
            found.append(Anomaly("text_after_calls", "text followed the calls; it was returned as content"))
        return list({anomaly.rule: anomaly for anomaly in found}.values())

    def _reasoning(self, prepared: Any, message: dict[str, Any], result: Any) -> list[Anomaly]:
        if not self._reasoning_end:
            return []
        began = prepared.start_state == "open" or bool(message.get("reasoning_content"))
        answered = bool(message.get("content")) or bool(message.get("tool_calls"))
        completion = prepared.completion
        ended_by_model = result.finish_reason != "length" and completion.stop_string is None
        if began and not answered and ended_by_model and not completion.reasoning_end_seen():
            return [Anomaly("unclosed_reasoning",
                            f"the reply ended inside reasoning without {self._reasoning_end!r}")]
        return []

    @staticmethod
    def _calls(message: dict[str, Any], cut: bool) -> list[Anomaly]:
        found = []
        for call in message.get("tool_calls") or []:
            if call.get("incomplete"):
                name = call.get("function", {}).get("name")
                found.append(Anomaly("cut_off_call" if cut else "invalid_call",
                                     f"the arguments of the call to {name!r} were incomplete or invalid"))
        return found

    def _leftover_call(self, content: str | None) -> int:
        """Where call markup the parser did not read as a call begins in `content` (+1), else 0."""
        if not content:
            return 0
        return min((i + 1 for marker in self._call_openers if (i := content.find(marker)) >= 0), default=0)

    def _leftover(self, prepared: Any, message: dict[str, Any], at: int, cut: bool) -> list[Anomaly]:
        if cut:
            return [Anomaly("cut_off_call", "the reply ended inside call markup (not returned as a call)")]
        content = message["content"]
        known = {tool.function.name for tool in prepared.request.tools or []}
        unknown = [name for name in self._call_names(content[at - 1:]) if name not in known]
        if unknown:
            return [Anomaly("unknown_tool", f"a call to {unknown[0]!r}, which is not among the request's "
                                            "tools, was returned as content")]
        if prepared.tool_call_policy == "strict":
            rule = "text_after_calls" if message.get("tool_calls") else "calls_after_text"
            return [Anomaly(rule, "text and calls were mixed; the strict policy returned them as content")]
        return [Anomaly("cut_off_call" if cut else "invalid_call",
                        "call markup that does not parse as a call was returned as content")]

    def _call_names(self, text: str) -> list[str]:
        stream = self._answer_analysis.parser(tools=None).stream()
        stream.feed(text)
        stream.finish()
        return [call["function"]["name"] for call in stream.message().get("tool_calls") or []]
