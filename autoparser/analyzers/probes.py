"""Probe conversations and a renderer that finds a conversation shape the template accepts.

Every analyzer learns from the difference between two renders: the prompt for a short history
(`add_generation_prompt=True`) and the same history followed by a probe assistant message. The
text the model would have produced is what the second render adds to the first.

Templates are picky about their input ("system message must come first", "content must be a
list", "tool call ids must be 9 characters"), so the history and the message fields are chosen
among a few shapes; the first shape that renders is kept for the whole analysis.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from autoparser.analysis import input_values
from autoparser.analyzers.diff import (
    common_prefix,
    common_suffix,
    is_marker,
    matched_ignoring_space,
    segments,
)
from autoparser.render import (
    RenderLimitExceeded,
    TemplateRenderError,
    render_template,
    shifted_clock,
    used_randomness,
)

USER_TEXT = "Probe question from the user."
SYSTEM_TEXT = "Probe system instructions."
CONTENT_TEXT = "Probe answer text."
REASONING_TEXT = "Probe reasoning steps."
TOOL_RESULT_TEXT = "Probe tool result."

NAME_A = "probe_alpha"
NAME_B = "probe_beta"
ARGS_A: dict[str, Any] = {"first_arg": "alpha value", "second_arg": 42}
ARGS_B: dict[str, Any] = {"third_arg": "beta value"}
ID_A = "pRb0A1x9Z"
ID_B = "pRb0B2y8W"

PROBE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": NAME_A,
            "description": "First probe tool.",
            "parameters": {
                "type": "object",
                "properties": {
                    "first_arg": {"type": "string", "description": "A text."},
                    "second_arg": {"type": "integer", "description": "A number."},
                },
                "required": ["first_arg"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": NAME_B,
            "description": "Second probe tool.",
            "parameters": {
                "type": "object",
                "properties": {"third_arg": {"type": "string", "description": "A text."}},
                "required": ["third_arg"],
            },
        },
    },
]

# Where a message carries its reasoning; `tool_plan` is the plan some formats write before calls.
REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking", "tool_plan")


def tool_call(name: str, args: dict[str, Any], call_id: str, as_text: bool) -> dict[str, Any]:
    import json

    arguments: Any = json.dumps(args, ensure_ascii=False) if as_text else copy.deepcopy(args)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@dataclass
class Shape:
    """How probe conversations are written for one template."""

    system: bool = False
    list_content: bool = False
    empty_content: Any = None  # what an assistant message with only tool calls carries as content


@dataclass
class Prober:
    """Renders probe conversations for one template and remembers what failed."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    base_kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)  # variables beyond the conversation, by kind
    shape: Shape = field(default_factory=Shape)
    errors: list[str] = field(default_factory=list)
    _cache: dict[Any, str | None] = field(default_factory=dict)

    # -- rendering ------------------------------------------------------------------------------

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = False, **kwargs: Any) -> str | None:
        """The rendered text, or None when the template refuses this input."""
        key = (repr(messages), repr(tools), add_generation_prompt, repr(sorted(kwargs.items())),
               repr(sorted(self.inputs.items())))
        if key in self._cache:
            return self._cache[key]
        context = input_values(self.inputs, tools)
        context.update(self.base_kwargs)
        context.update(kwargs)
        try:
            text: str | None = render_template(self.source, messages, tools=tools,
                                               add_generation_prompt=add_generation_prompt,
                                               bos_token=self.bos_token, eos_token=self.eos_token,
                                               **context)
        except RenderLimitExceeded:
            raise  # a bound that trips once trips for every probe: retrying other shapes only wastes time
        except TemplateRenderError as exc:
            if len(self.errors) < 20:
                self.errors.append(str(exc))
            text = None
            if tools is None:
                # some templates iterate `tools` unguarded: an empty list is how to say "no tools"
                text = self.render(messages, tools=[], add_generation_prompt=add_generation_prompt, **kwargs)
        self._cache[key] = text
        return text

    # -- conversations --------------------------------------------------------------------------

    def text(self, value: str) -> Any:
        return [{"type": "text", "text": value}] if self.shape.list_content else value

    def history(self) -> list[dict[str, Any]]:
        messages = []
        if self.shape.system:
            messages.append({"role": "system", "content": self.text(SYSTEM_TEXT)})
        messages.append({"role": "user", "content": self.text(USER_TEXT)})
        return messages

    def prompt(self, tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str | None:
        return self.render(self.history(), tools=tools, add_generation_prompt=True, **kwargs)

    def conversation(self, message: dict[str, Any], tools: list[dict[str, Any]] | None = None,
                     **kwargs: Any) -> str | None:
        return self.render(self.history() + [message], tools=tools, add_generation_prompt=False, **kwargs)

    def output(self, message: dict[str, Any], tools: list[dict[str, Any]] | None = None,
               **kwargs: Any) -> str | None:
        """What the model would have generated for `message`: the conversation minus the prompt."""
        prompt = self.prompt(tools=tools, **kwargs)
        full = self.conversation(message, tools=tools, **kwargs)
        if prompt is None or full is None:
            return None
        if full.startswith(prompt):
            return full[len(prompt):]
        after_block = self._output_before_trailing_block(prompt, full, tools, kwargs)
        if after_block is not None:
            return after_block
        # Some templates write the last user turn differently when it is last (tool lists placed
        # before it, say): anchor on the last user text and what the prompt writes after it.
        if USER_TEXT in prompt and USER_TEXT in full:
            tail = prompt[prompt.rindex(USER_TEXT):]
            at = full.rfind(tail)
            if at >= 0:
                return full[at + len(tail):]
            # the same, with whitespace between segments allowed to differ
            start = full.rindex(USER_TEXT)
            return full[start + matched_ignoring_space(tail, full[start:]):]
        # The history renders the reply differently from what the prompt opened (a reasoning block
        # the prompt forces but the history drops, say): the reply starts where the two diverge.
        return full[len(common_prefix(prompt, full)):]

    def _output_before_trailing_block(self, prompt: str, full: str, tools: list[dict[str, Any]] | None,
                                      kwargs: dict[str, Any]) -> str | None:
        """Some templates end every conversation with a block of their own (instructions before
        the generation prompt: `<|SYSTEM|>Write 'Action:'...`): the prompt writes it before the
        generation prompt, the conversation after the reply. Without it on both sides the
        conversation starts with the prompt, and the reply is what follows."""
        bare = self.render(self.history(), tools=tools, add_generation_prompt=False, **kwargs)
        if bare is None or not prompt.startswith(bare) or len(prompt) == len(bare):
            return None
        opener, before = prompt[len(bare):], bare
        shared = segments(common_suffix(before, full))
        for at in range(len(shared)):
            block = "".join(shared[at:])
            if not any(is_marker(piece) for piece in shared[at:]):
                break
            head, rest = before[: len(before) - len(block)] + opener, full[: len(full) - len(block)]
            if rest.startswith(head) and len(rest) > len(head):
                return rest[len(head):]
        return None

    def assistant(self, content: str | None = None, **fields: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant"}
        message["content"] = self.text(content) if content is not None else self.shape.empty_content
        message.update(fields)
        return message

    def calls_message(self, calls: list[tuple[str, dict[str, Any], str]], as_text: bool,
                      content: str | None = None) -> dict[str, Any]:
        return self.assistant(content, tool_calls=[tool_call(n, a, i, as_text) for n, a, i in calls])

    # -- determinism ----------------------------------------------------------------------------

    # A second and a microsecond: what changes while an analysis runs. A date printed in the
    # system prompt stays put, as it does between the renders of one analysis.
    CLOCK_SHIFT_SECONDS = 1.000001

    def renders_the_same(self) -> bool:
        """Whether a conversation renders twice alike, the second time with `strftime_now` a
        second later, and without drawing a random value. Templates that call `lipsum()`,
        `random` or print the seconds do not: the differences between probe renders are then
        partly noise. Renders bypass the cache."""
        conversation = self.history() + [self.assistant(CONTENT_TEXT)]
        renders = []
        for shift in (0.0, self.CLOCK_SHIFT_SECONDS):
            with shifted_clock(shift):
                try:
                    renders.append(render_template(self.source, conversation, tools=PROBE_TOOLS,
                                                   add_generation_prompt=False, bos_token=self.bos_token,
                                                   eos_token=self.eos_token,
                                                   **{**input_values(self.inputs, PROBE_TOOLS), **self.base_kwargs}))
                except TemplateRenderError:
                    return True  # nothing to compare: the probes that render tell the rest
            if used_randomness():  # two random draws may agree by chance; drawing at all is enough
                return False
        return renders[0] == renders[1]

    # -- choosing a shape -----------------------------------------------------------------------

    def choose_shape(self) -> bool:
        """Pick the first history shape the template renders; False when none renders."""
        for system in (False, True):
            for list_content in (False, True):
                self.shape = Shape(system=system, list_content=list_content)
                prompt = self.prompt()
                full = self.conversation(self.assistant(CONTENT_TEXT))
                if prompt is not None and full is not None and CONTENT_TEXT in full:
                    return True
        for system in (False, True):
            self.shape = Shape(system=system)
            if self.prompt() is not None:
                return True
        self.shape = Shape()
        return False
