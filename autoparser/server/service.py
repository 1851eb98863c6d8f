"""From a checked request to a generation job: prompt, limits, grammar, parser, sampling.

`ChatService` holds what start-up produced once (the template `Analysis`, the engine, the
server's defaults) and turns each request into a `PreparedChat`. Everything that can refuse a
request (a template that raises, a prompt that does not fit, an unknown tool) happens here,
before the request takes a place in the queue, so a refusal costs no generation time.
Grammars and parsers are cached by their inputs: building them is the slow part, and clients
send the same tool set again and again. Both start where the rendered prompt leaves the model
(`start_state`: inside reasoning the prompt opened, in the answer after a tool result, ...), so
they are keyed by that state rather than by the prompt text, which differs on every turn. The
caches are bounded in estimated bytes as well as in entries: the client chooses the tools.
The template runs in child processes (`RenderPool`), never in the server's own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoparser.analysis import Analysis, ReasoningAnalysis
from autoparser.caching import BoundedCache
from autoparser.language.build import Request, build_language, reasoning_cut
from autoparser.language.request import OPEN, start_state
from autoparser.render_process import RenderPool
from autoparser.server import protocol
from autoparser.server.anomalies import AnomalyFinder
from autoparser.server.completion import Completion, OutputOptions
from autoparser.server.errors import APIError, bad_request
from autoparser.server.preamble import template_hides_tools, tools_preamble, with_preamble
from autoparser.server.prefix_tokens import PrefixTokenizer
from autoparser.server.protocol import ChatCompletionRequest, GenerationFields
from autoparser.server.validation import (
    InvalidInput,
    PromptTooLong,
    SpecialMask,
    tokenize_prompt,
    untrusted_texts,
)
from autoparser.server.worker import ReasoningPhase

log = logging.getLogger("autoparser.server")

# Template variables the server sets itself; a request cannot override them.
RESERVED_TEMPLATE_VARS = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"}

# OpenAI's sampling defaults; llama.cpp's own (top_k=40, min_p=0.05, temperature 0.8) would
# surprise a client that sent none of these fields.
DEFAULT_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                    "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}


EXAMPLE_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
"""The tool the start-up log shows the preamble with."""


@dataclass
class ServerSettings:
    model_name: str = "autoparser"
    """The name responses carry unless the request named another of `model_aliases`."""
    model_aliases: tuple[str, ...] = ()
    """Other names the server answers to (more `--served-model-name`s, the GGUF's own name)."""
    tool_call_policy: str = "lenient"
    max_queue: int = 16
    max_body_bytes: int = 8 * 1024 * 1024
    api_key: str | None = None
    reasoning_budget: int | None = None
    """Default most reasoning tokens per request; None lets the model think until it stops."""
    tool_preamble: str = "auto"
    """`auto`: list the tools in a system preamble when the template never shows them; `off`: never."""
    allowed_hosts: tuple[str, ...] = ("*",)
    """Names the `Host` header may carry (`*`: any); `serve` derives them from the bound address."""
    cors_allow_origins: tuple[str, ...] = ()
    """Origins whose web pages may call the API (CORS); none by default."""


@dataclass
class PreparedChat:
    """Everything the generation loop and the response need for one request."""

    request: ChatCompletionRequest
    prompt: str
    prompt_tokens: list[int]
    max_tokens: int
    sampling: Any
    grammar: Any
    reasoning: ReasoningPhase | None
    stop_token_ids: tuple[int, ...]
    completion: Completion
    warnings: list[str] = field(default_factory=list)
    start_state: str = ""
    """Where the output starts (`open`: inside reasoning the prompt opened; see `start_state`)."""
    tool_call_policy: str = "lenient"


# What a cached entry holds, estimated from its key (the tools as JSON) and what was built: a
# reading parser takes about 50 bytes per byte of tools JSON (1.5 MB for 31 KB of tools,
# measured with tracemalloc), a grammar result a few times its GBNF text.
PARSER_BYTES_PER_KEY_BYTE = 64
CACHE_BYTES = 128 << 20
"""The most each of the grammar, parser and preamble caches holds (estimated bytes)."""
PROMPT_PREFIX_BYTES = 16 << 20
"""The most the prompt beginnings kept with their tokens take (`PrefixTokenizer`)."""


def _grammar_weight(key: Any, result: Any) -> int:
    return len(key) + 4 * len(getattr(result, "gbnf", "") or "")


def _parser_weight(key: Any, parser: Any) -> int:
    return PARSER_BYTES_PER_KEY_BYTE * len(key)


def _preamble_weight(key: Any, text: Any) -> int:
    return len(key) + len(text or "")


class ChatService:
    """The model-wide state requests need (analysis, engine, settings, caches) and `prepare`."""

    def __init__(self, analysis: Analysis, engine: Any, settings: ServerSettings):
        self.analysis = analysis
        self.engine = engine
        self.settings = settings
        self.special_tokens: frozenset[str] = frozenset(getattr(engine, "special_tokens", ()) or ())
        self._mask = SpecialMask(self.special_tokens)
        # Text -> id lets the grammar write `<[id]>`, the token reference form that always parses.
        self.special_token_ids = {text: token for text in self.special_tokens
                                  if (token := engine.token_id(text)) is not None}
        self._end_of_turn_ids, self._end_of_turn_texts = self._end_of_turn()
        self._unused_specials = self.special_tokens - self._marker_tokens()
        self.prompt_tokens = PrefixTokenizer(lambda text: engine.tokenize(text, parse_special=True, add_bos=False),
                                             self.special_token_ids, max_bytes=PROMPT_PREFIX_BYTES)
        # Requests are rendered in child processes that are killed when a render outruns its
        # deadline (see `autoparser.render_process`).
        self.renderer = RenderPool(analysis.source, analysis.bos_token, analysis.eos_token)
        self.renderer.start()
        self._grammars = BoundedCache(max_bytes=CACHE_BYTES, weigh=_grammar_weight)
        self._parsers = BoundedCache(max_bytes=CACHE_BYTES, weigh=_parser_weight)
        self._preambles = BoundedCache(max_bytes=CACHE_BYTES, weigh=_preamble_weight)
        self.tools_hidden = settings.tool_preamble != "off" and template_hides_tools(analysis)
        self.anomalies = AnomalyFinder(analysis)
        self.model_names = tuple(dict.fromkeys([settings.model_name, *settings.model_aliases]))
        self._log_preamble()

    def close(self) -> None:
        """Stop the render processes."""
        self.renderer.close()

    # -- per request ---------------------------------------------------------------------------

    def check_model(self, name: str | None) -> str:
        """The served name a request's `model` picks (the first one when it names none); a name
        the server does not answer to gets 404 `model_not_found`, as OpenAI answers."""
        if not name:
            return self.settings.model_name
        if name not in self.model_names:
            served = ", ".join(f"'{n}'" for n in self.model_names)
            raise APIError(404, f"The model '{name}' does not exist. This server serves {served}.",
                           param="model", code="model_not_found")
        return name

    def prepare(self, request: ChatCompletionRequest) -> PreparedChat:
        messages = protocol.template_messages(request.messages)
        tools = protocol.tool_dicts(request)
        tool_choice = protocol.tool_choice_value(request)
        reasoning = self.analysis.reasoning
        thinking = protocol.requested_thinking(request, reasoning.toggle, reasoning.toggle_on)
        template_kwargs = request.chat_template_kwargs or {}
        client = [messages, tools, template_kwargs]
        preamble = self.wants_preamble(request, tools, tool_choice)
        prompt = self.render_conversation(messages, tools, thinking, template_kwargs, preamble)
        masked = None
        if self._mask.spelled_in(client):
            # Rendered again with the client's special-token spellings masked, to tell them from
            # the template's own markers (see `SpecialMask`).
            try:
                masked = self.render_conversation(self._mask.mask(messages), self._mask.mask(tools), thinking,
                                                  self._mask.mask(template_kwargs), preamble)
            except APIError:
                masked = None
        prompt_tokens = self.tokenize(prompt, untrusted_texts(client), masked)
        max_tokens = self.clip_max_tokens(len(prompt_tokens), protocol.requested_max_tokens(request))
        policy = request.tool_call_policy or self.settings.tool_call_policy
        budget = protocol.thinking_budget(request)
        if budget is None:
            budget = self.settings.reasoning_budget
        warnings = self.thinking_warnings(thinking)
        grammar, phase = None, None
        start = self.start_state(thinking, prompt)
        if start[0] == OPEN and budget is None and self.answer_required(request, tool_choice):
            budget = max_tokens - answer_reserve(max_tokens)
        if start[0] == OPEN and (budget is not None or self.constrained(request, tools, tool_choice)):
            answer_grammar, grammar_warnings = self.grammar(request, tools, tool_choice, None, after_reasoning=True)
            call_tokens = self.call_tokens_in_reasoning(request, tools, tool_choice, thinking, prompt)
            phase = ReasoningPhase(
                end_text=reasoning.end, end_tokens=self.engine.tokenize(reasoning.end, parse_special=True),
                answer_grammar=answer_grammar, budget=budget, no_eos=self.answer_required(request, tool_choice),
                call_tokens=call_tokens,
                call_grammar=dataclasses.replace(answer_grammar, lazy=False) if call_tokens else None)
        else:
            grammar, grammar_warnings = self.grammar(request, tools, tool_choice, thinking, prompt=prompt)
        warnings += grammar_warnings
        stream = self.parser(tools, thinking, request.parallel_tool_calls, tool_choice, policy, prompt,
                             protocol.response_format(request)).stream()
        return PreparedChat(
            request=request, prompt=prompt, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
            sampling=self.sampling(request, request.top_logprobs_wanted()), grammar=grammar, reasoning=phase,
            stop_token_ids=self.stop_token_ids(request),
            completion=Completion(stream, self.output_options(request), warnings), warnings=warnings,
            start_state=start[0], tool_call_policy=policy)

    def call_tokens_in_reasoning(self, request: ChatCompletionRequest, tools: list[dict[str, Any]] | None,
                                 tool_choice: Any, thinking: bool | None, prompt: str) -> tuple[int, ...]:
        """The calls' openers that end reasoning where the model writes them inside it (the
        parser's reading), as single tokens; none unless the answer's grammar is the calls'."""
        calls_grammar = self.constrained(request, tools, tool_choice) and bool(tools) and (
            self.answer_required(request, tool_choice) or protocol.response_schema(request) is None)
        if not calls_grammar:
            return ()
        cut = reasoning_cut(self.analysis, Request(tools=tuple(tools or ()), thinking=thinking,
                                                   tool_choice=tool_choice, prompt=prompt, reading=True))
        tokens = (self._single_token(marker) for marker in cut.interrupts)
        return tuple(token for token in tokens if token is not None)

    def thinking_warnings(self, thinking: bool | None) -> list[str]:
        """What the request asked of thinking that the template cannot do (said, never silent)."""
        reasoning = self.analysis.reasoning
        if thinking is None or self.analysis.thinking_enabled(thinking) == thinking:
            return []
        if thinking and reasoning.mode == "none":
            return ["thinking was requested, but this model's chat template has no reasoning: "
                    "the reply has none"]
        if thinking:
            return ["thinking was requested, but the chat template has no switch for it and does not "
                    "open reasoning itself: the model decides whether to reason"]
        return ["thinking off was requested, but the chat template has no switch for it and always "
                "reasons: the reply still begins with reasoning"]

    def wants_preamble(self, request: ChatCompletionRequest, tools: list[dict[str, Any]] | None,
                       tool_choice: Any) -> bool:
        return self.tools_hidden and bool(tools) and tool_choice != "none" and request.tool_preamble

    def preamble(self, tools: list[dict[str, Any]], thinking: bool | None) -> str:
        """The tools preamble for `tools` (cached: clients send the same tools every turn)."""
        kwargs = {**self.analysis.input_kwargs(tools), **self.analysis.thinking_kwargs(thinking)}
        return self._preambles.get(_key(tools, kwargs), lambda: tools_preamble(self.analysis, tools, kwargs,
                                                                               self.renderer.render))

    def start_state(self, thinking: bool | None, prompt: str | None) -> tuple[str, bool]:
        """Where the output starts after `prompt`, as the parser and the grammar both see it:
        (`open`/`closed`/`free`/`implied`, whether it continues the prompt's partial answer)."""
        return start_state(self.analysis, thinking, prompt)

    def constrained(self, request: ChatCompletionRequest, tools: list[dict[str, Any]] | None,
                    tool_choice: Any) -> bool:
        """Whether this request's answer runs under a grammar."""
        if protocol.response_schema(request) is not None:
            return True
        return bool(tools) and tool_choice != "none" and self.analysis.tools.supported

    @staticmethod
    def answer_required(request: ChatCompletionRequest, tool_choice: Any) -> bool:
        forced = tool_choice == "required" or isinstance(tool_choice, dict)
        return forced or protocol.response_schema(request) is not None

    def render_conversation(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                            thinking: bool | None, template_kwargs: dict[str, Any], preamble: bool) -> str:
        """The prompt, with the tools preamble first when the template hides the tools."""
        if preamble:
            messages = with_preamble(messages, self.preamble(tools or [], thinking))
        return self.render(messages, tools, thinking, template_kwargs)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               thinking: bool | None, template_kwargs: dict[str, Any]) -> str:
        from autoparser.render import TemplateRenderError

        reserved = RESERVED_TEMPLATE_VARS & set(template_kwargs)
        if reserved:
            raise bad_request(f"chat_template_kwargs may not set {sorted(reserved)}.",
                              param="chat_template_kwargs")
        kwargs = {**self.analysis.input_kwargs(tools), **self.analysis.thinking_kwargs(thinking), **template_kwargs}
        try:
            return self.renderer.render(messages, tools=tools, add_generation_prompt=True, **kwargs)
        except TemplateRenderError as exc:
            raise APIError(400, f"The chat template cannot render this conversation: {exc}",
                           param="messages", code="template_error") from None

    def tokenize(self, prompt: str, client_texts: set[str], masked: str | None = None) -> list[int]:
        """The prompt's tokens; one that cannot fit the context is refused before tokenizing.
        `masked`: the same prompt rendered from masked client input (`SpecialMask`)."""
        try:
            return tokenize_prompt(self.engine, prompt, client_texts, self.special_tokens,
                                   limit=int(self.engine.n_ctx), masked=masked, mask=self._mask,
                                   whole=self.prompt_tokens)
        except PromptTooLong as exc:
            self.clip_max_tokens(exc.at_least, None, at_least=True)
            raise
        except InvalidInput as exc:
            raise bad_request(str(exc), param=exc.param) from None

    def clip_max_tokens(self, prompt_length: int, requested: int | None, param: str = "messages",
                        at_least: bool = False) -> int:
        """The completion budget: what was asked for, at most what the context has left.

        A request for more tokens than a whole slot holds is refused, as OpenAI refuses more
        than a model's output limit; one that only meets a long prompt is clipped."""
        n_ctx = int(self.engine.n_ctx)
        if requested is not None and requested > n_ctx:
            raise APIError(400, f"max_tokens is too large: {requested}. This model supports at most {n_ctx} "
                                f"completion tokens, whereas you provided {requested}.",
                           param="max_tokens", code="invalid_value")
        remaining = n_ctx - prompt_length
        if remaining < 1:  # OpenAI's wording, which clients (litellm, LangChain) recognise
            raise APIError(400, f"This model's maximum context length is {n_ctx} tokens. However, your "
                                f"messages resulted in {'at least ' if at_least else ''}{prompt_length} "
                                "tokens. Please reduce the length of the messages.",
                           param=param, code="context_length_exceeded")
        return remaining if requested is None else min(requested, remaining)

    def sampling(self, request: GenerationFields, logprobs: int | None = None) -> Any:
        from autoparser.llama.engine import SamplingParams

        values: dict[str, Any] = dict(DEFAULT_SAMPLING, logprobs=logprobs)
        for name in (*DEFAULT_SAMPLING, "seed"):
            value = getattr(request, name)
            if value is not None:
                values[name] = value
        if values["top_k"] < 0:  # vLLM spells "no top-k" as -1
            values["top_k"] = 0
        return SamplingParams(**values)

    def stop_token_ids(self, request: GenerationFields) -> tuple[int, ...]:
        ids = list(request.stop_token_ids or ())
        if not request.ignore_eos:
            ids.extend(self._end_of_turn_ids)
        return tuple(dict.fromkeys(ids))

    def output_options(self, request: GenerationFields, parsed: bool = True) -> OutputOptions:
        """How the output is cut and cleaned; `parsed` is False for raw text completions."""
        user_stops = protocol.stop_strings(request)
        internal = [] if request.ignore_eos else self._end_of_turn_texts
        # The end-of-turn token ends generation; if the engine hands it over, it is not output.
        dropped = set() if request.ignore_eos else set(self._end_of_turn_special_texts())
        if request.skip_special_tokens:
            dropped |= self._unused_specials if parsed else self.special_tokens
        return OutputOptions(
            stops=user_stops + internal,
            kept_stops=frozenset(user_stops) if request.include_stop_str_in_output else frozenset(),
            dropped_tokens=frozenset(dropped),
            separate_reasoning=request.separate_reasoning,
            reasoning_start=self.analysis.reasoning.start,
            reasoning_end=self.analysis.reasoning.end,
            collect_extensions=request.extensions and not request.stream,
            hidden_markers=self.special_tokens if request.skip_special_tokens and parsed else frozenset(),
            cutoff_markers=self._call_openers() if parsed else (),
            logprobs=request.top_logprobs_wanted() is not None,
            full_text=request.full_text,
            hold_reasoning=request.stream and not getattr(request, "stream_reasoning", True))

    # -- grammar and parser --------------------------------------------------------------------

    def grammar(self, request: ChatCompletionRequest, tools: list[dict[str, Any]] | None,
                tool_choice: Any, thinking: bool | None,
                after_reasoning: bool = False, prompt: str | None = None) -> tuple[Any, list[str]]:
        """The grammar for this request, as the engine's `GrammarSpec`, and its warnings.

        Forced tool calls (`required`, named) get the full grammar; `auto` with tools gets a lazy
        grammar that wakes on the analysis' triggers; `none` generates freely, unless
        `response_format` asks for JSON. A forced tool choice wins over `response_format`.
        With `after_reasoning`, the grammar covers only what follows the reasoning; otherwise it
        starts where `prompt` leaves the model.
        """
        schema = protocol.response_schema(request)
        forced = tool_choice == "required" or isinstance(tool_choice, dict)
        if not forced and schema is not None:
            result = self._grammars.get(_key("schema", schema), lambda: self._schema_grammar(schema))
        elif self.constrained(request, tools, tool_choice):
            start = None if after_reasoning else self.start_state(thinking, prompt)
            key = _key("tools", tools, tool_choice, self.analysis.thinking_enabled(thinking),
                       request.parallel_tool_calls, after_reasoning, start)
            result = self._grammars.get(key, lambda: self._tools_grammar(
                tools or [], tool_choice, thinking, request.parallel_tool_calls, after_reasoning,
                None if after_reasoning else prompt))
        else:
            return None, []
        warnings = list(getattr(result, "warnings", []) or [])
        for warning in warnings:
            log.warning("grammar: %s", warning)
        return self._grammar_spec(result), warnings

    def parser(self, tools: list[dict[str, Any]] | None, thinking: bool | None, parallel: bool,
               tool_choice: Any, policy: str, prompt: str | None = None,
               response_format: dict[str, Any] | None = None) -> Any:
        """The parser for one request; with `prompt` it starts where that prompt leaves the model;
        with a `response_format` asking for JSON it reads that JSON in a code fence as the answer.
        Cached by the start state: the prompt matters to it only through that."""
        key = _key(tools, self.analysis.thinking_enabled(thinking), parallel, tool_choice, policy,
                   self.start_state(thinking, prompt), response_format)
        return self._parsers.get(key, lambda: self.analysis.parser(
            tools=tools, thinking=thinking, parallel_tool_calls=parallel, tool_choice=tool_choice,
            tool_call_policy=policy, prompt=prompt, response_format=response_format))

    def _answer_analysis(self) -> Analysis:
        """The analysis of what follows reasoning: the same output language without reasoning."""
        return dataclasses.replace(self.analysis, reasoning=ReasoningAnalysis())

    def _tools_grammar(self, tools: list[dict[str, Any]], tool_choice: Any, thinking: bool | None,
                       parallel: bool, after_reasoning: bool, prompt: str | None) -> Any:
        from autoparser.generators.gbnf import build_grammar

        analysis = self._answer_analysis() if after_reasoning else self.analysis
        return self._checked(lambda: build_grammar(
            analysis, tools=tools, tool_choice=tool_choice, thinking=None if after_reasoning else thinking,
            parallel_tool_calls=parallel, special_tokens=self.special_token_ids, prompt=prompt))

    def _schema_grammar(self, schema: dict[str, Any]) -> Any:
        """JSON following `schema`, from the start of the answer.

        Prompts that open reasoning get it after the reasoning (the reasoning phase). Where the
        model could only choose to open reasoning itself, the JSON starts at once: no thinking.
        """
        from autoparser.generators.gbnf import json_object_grammar, json_schema_grammar

        if schema == {"type": "object"}:
            return self._checked(json_object_grammar)
        return self._checked(lambda: json_schema_grammar(schema))

    def _checked(self, build: Callable[[], Any]) -> Any:
        """Build a grammar and have llama.cpp check it now, so a bad one is this request's 400
        rather than a failure in the middle of its stream (results are cached, so once)."""
        from autoparser.llama.grammar_check import validate_gbnf, validate_trigger_patterns

        try:
            result = build()
            validate_gbnf(result.gbnf, getattr(result, "root", "root"), vocab=self.engine)
            validate_trigger_patterns(list(result.trigger_patterns))
        except (ValueError, TypeError, KeyError) as exc:
            raise APIError(400, f"Cannot build a grammar for this request: {exc}",
                           param="tools", code="grammar_error") from None
        return result

    def _grammar_spec(self, result: Any) -> Any:
        """`GrammarResult` -> the engine's `GrammarSpec`.

        The trigger patterns are complete; trigger words that are one token of the vocabulary
        also trigger on that token, which saves matching text.
        """
        from autoparser.llama.engine import GrammarSpec

        trigger_tokens = [token for token in map(self._single_token, result.trigger_words) if token is not None]
        return GrammarSpec(gbnf=result.gbnf, root=getattr(result, "root", "root"), lazy=bool(result.lazy),
                           trigger_patterns=list(result.trigger_patterns), trigger_tokens=trigger_tokens)

    def _single_token(self, text: str) -> int | None:
        """The token id of `text` when it is one token.

        Runs while the worker generates, so it only tokenizes: the engine's `token_id` decodes
        pieces through a buffer the generation loop shares.
        """
        if text in self.special_token_ids:
            return self.special_token_ids[text]
        tokens = self.engine.tokenize(text, parse_special=True)
        return tokens[0] if len(tokens) == 1 else None

    # -- start-up facts ------------------------------------------------------------------------

    def _log_preamble(self) -> None:
        if self.tools_hidden:
            example = tools_preamble(self.analysis, [EXAMPLE_TOOL])
            log.info("tools preamble: on (the template never shows tool definitions); requests with tools "
                     "get a system preamble such as:\n%s", example)
        elif self.settings.tool_preamble == "off" and template_hides_tools(self.analysis):
            log.warning("tools preamble: off, and the template never shows tool definitions: "
                        "the model is not told which tools exist")

    def _end_of_turn(self) -> tuple[list[int], list[str]]:
        """The analysis' end-of-turn strings, as token ids where they are one token."""
        ids: list[int] = []
        texts: list[str] = []
        for stop in self.analysis.stop:
            token = self.engine.token_id(stop)
            if token is not None:
                ids.append(token)
            else:
                texts.append(stop)
        return ids, texts

    def _call_openers(self) -> tuple[str, ...]:
        tools = self.analysis.tools
        return tuple(m for m in (tools.markers.section_start, tools.markers.call_start) if m.strip()) \
            if tools.supported else ()

    def _end_of_turn_special_texts(self) -> list[str]:
        return [stop for stop in self.analysis.stop if stop in self.special_tokens]

    def _marker_tokens(self) -> set[str]:
        """Special tokens that occur inside a marker the parser reads (the reading language's own
        markers, any tool, thinking as the template defaults), or that the analysis preserves;
        they are never skipped."""
        language = build_language(self.analysis, Request(reading=True, lazy=False))
        markers = [*language.markers(), *self.analysis.preserved_tokens]
        return {token for token in self.special_tokens if any(token in marker for marker in markers)}


ANSWER_RESERVE_SHARE = 2
"""A required answer (a forced call, JSON) after reasoning keeps 1/ANSWER_RESERVE_SHARE of `max_tokens`..."""
ANSWER_RESERVE_MAX = 1024
"""...and at most this many tokens: reasoning that runs into the rest is closed, and the answer follows."""


def answer_reserve(max_tokens: int) -> int:
    """The tokens a required answer keeps from reasoning that has no budget of its own."""
    return max(1, min(max_tokens // ANSWER_RESERVE_SHARE, ANSWER_RESERVE_MAX))


def _key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
