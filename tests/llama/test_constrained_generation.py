"""Constrained generation through the real llama.cpp runtime, on the tiny random-weight DeepSeek model.

The proof that the grammar, the engine and the parser fit together, for real chat templates of
several families (analysed with `autoparser.analyze`, not hand-built):

* ``tool_choice="required"``: over 20 seeds per template, the model's output (detokenized with
  special tokens kept) parses to one tool call whose arguments validate against the tool's schema,
  format keywords included. The model's weights are noise, so whatever it writes is the grammar's
  doing. Reasoning is on wherever the template has it.
* ``tool_choice="auto"`` (a lazy grammar): text before the trigger is exactly what the model
  writes without any grammar, a trigger inside reasoning does not start the grammar, and the call
  after the trigger is well-formed. A random model never writes a trigger by itself; it is
  steered there with a logit bias (see `Steering`).
* the grammar's own sentences (sampled from the GBNF without a model) all parse, for the same
  analyses, in every tool-choice mode, parallel calls included;
* the grammars, with special tokens referenced by text and by id, compile on the tiny vocabulary.

Generation uses ``parallel_tool_calls=False``: with more calls allowed, a random model rarely
picks end-of-generation among the tokens the grammar allows, and runs end at the token budget.

Special tokens come from the engine: markers that are single special tokens of the tiny vocab
(the DeepSeek markers, ``<think>``, ``</think>``) are referenced as tokens, everything else is
text, as the server does it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import jsonschema
import numpy as np
import pytest
from gbnf_fixtures import TOOLS as FIXTURE_TOOLS
from gbnf_sampler import Gbnf

import autoparser
from autoparser.analysis import Analysis
from autoparser.generators.gbnf import GrammarResult, build_grammar

if TYPE_CHECKING:  # llama-cpp-python is needed only by the tests that run the model
    from autoparser.llama.engine import Engine, GenerationStats, GrammarSpec

pytest_plugins = ["tiny_model"]

# -- templates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TemplateCase:
    """A real chat template: `corpus` is "llama.cpp" or "shared" (see tests/corpora.py)."""

    id: str
    corpus: str
    file: str


CASES = [
    TemplateCase("deepseek-v3.1", "llama.cpp", "deepseek-ai-DeepSeek-V3.1.jinja"),
    TemplateCase("deepseek-v3-0324", "shared", "xinference__deepseek-v3-0324-92ebdf26.jinja"),
    TemplateCase("deepseek-v3-vllm", "shared", "vllm__tool_chat_template_deepseekv3.jinja"),
    TemplateCase("deepseek-r1", "llama.cpp", "llama-cpp-deepseek-r1.jinja"),
    TemplateCase("deepseek-r1-hf", "shared", "hfjs-e2e__deepseek-ai-DeepSeek-R1.jinja"),
    TemplateCase("qwen3", "llama.cpp", "Qwen-Qwen3-0.6B.jinja"),
    TemplateCase("qwen3-coder", "llama.cpp", "Qwen3-Coder.jinja"),
    TemplateCase("glm-4.6", "llama.cpp", "GLM-4.6.jinja"),
    TemplateCase("mistral-nemo", "llama.cpp", "mistralai-Mistral-Nemo-Instruct-2407.jinja"),
    TemplateCase("kimi-k2", "llama.cpp", "moonshotai-Kimi-K2.jinja"),
    TemplateCase("llama-3.1", "llama.cpp", "meta-llama-Llama-3.1-8B-Instruct.jinja"),
]
CASE_IDS = [case.id for case in CASES]
BY_ID = {case.id: case for case in CASES}


def template_source(case: TemplateCase) -> str:
    """The template's text; skips the test when its corpus is not available."""
    import corpora

    paths = corpora.llamacpp_templates() if case.corpus == "llama.cpp" else corpora.shared_templates()
    for path in paths:
        if path.name == case.file:
            return path.read_text(encoding="utf-8")
    pytest.skip(f"{case.file} is not in the {case.corpus} corpus")


@cache
def _analysis(case_id: str, bos_token: str, eos_token: str) -> Analysis:
    return autoparser.analyze(template_source(BY_ID[case_id]), bos_token=bos_token, eos_token=eos_token)


def analysis_for(case_id: str, engine: Engine) -> Analysis:
    """The analysis of a case's template with the engine's BOS/EOS texts (analysed once)."""
    return _analysis(case_id, engine.bos_token, engine.eos_token)


# -- tools ---------------------------------------------------------------------------------------


def tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": parameters}}


# Every string is bounded (maxLength, enum or format) so that a model that never chooses to stop
# still reaches the end of a call; reasoning is capped with `free_text_limit` instead.
WEATHER = tool("get_weather", {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 8},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["city"],
})
BOOK_TRIP = tool("book_trip", {
    "type": "object",
    "properties": {
        "traveler": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 10},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        "stops": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 8},
                    "date": {"type": "string", "format": "date"},
                },
                "required": ["city"],
            },
            "minItems": 1,
            "maxItems": 2,
        },
        "class": {"enum": ["economy", "business"]},
        "flexible": {"type": "boolean"},
        "budget": {"type": ["number", "null"], "minimum": 0},
    },
    "required": ["traveler", "stops"],
})
TOOLS = [WEATHER, BOOK_TRIP]


def validators(tools: list[dict[str, Any]]) -> dict[str, jsonschema.protocols.Validator]:
    """Each tool's argument validator, checking ``format`` too (date, email, ...)."""
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    return {t["function"]["name"]: jsonschema.Draft202012Validator(t["function"]["parameters"],
                                                                   format_checker=checker) for t in tools}


VALIDATORS = validators(TOOLS)
MESSAGES = [{"role": "user", "content": "Book me a trip to Paris and tell me the weather there."}]

FREE_TEXT_LIMIT = 32  # characters of reasoning the grammar allows (the tiny model never ends it by itself)
MAX_TOKENS = 700  # the longest call seen is about 450 tokens (mostly whitespace tokens inside JSON)
SEEDS = range(20)


# -- engine helpers ------------------------------------------------------------------------------


def special_token_ids(engine: Engine) -> dict[str, int]:
    """The engine's special tokens as text -> id, so the grammar writes ``<[id]>`` references."""
    return {text: token for text in engine.special_tokens if (token := engine.token_id(text)) is not None}


def grammar_for(engine: Engine, analysis: Analysis, tool_choice: str,
                tools: list[dict[str, Any]] = TOOLS) -> GrammarResult:
    """The request grammar as the server builds it, checked by llama.cpp before any use."""
    from autoparser.llama.grammar_check import validate_gbnf, validate_trigger_patterns

    result = build_grammar(
        analysis, tools, tool_choice=tool_choice, thinking=True, parallel_tool_calls=False,
        special_tokens=special_token_ids(engine), end_tokens=[engine.eos_token],
        free_text_limit=FREE_TEXT_LIMIT,
    )
    validate_gbnf(result.gbnf, result.root, vocab=engine)
    validate_trigger_patterns(result.trigger_patterns)
    return result


def grammar_spec(engine: Engine, result: GrammarResult) -> GrammarSpec:
    """`GrammarResult` -> `GrammarSpec`; trigger words that are one special token trigger on it."""
    from autoparser.llama.engine import GrammarSpec

    ids = special_token_ids(engine)
    tokens = [ids[word] for word in result.trigger_words if word in ids]
    return GrammarSpec(gbnf=result.gbnf, root=result.root, lazy=result.lazy,
                       trigger_patterns=list(result.trigger_patterns), trigger_tokens=tokens)


def prompt_tokens(engine: Engine, analysis: Analysis, tools: list[dict[str, Any]] = TOOLS) -> list[int]:
    prompt = analysis.render(MESSAGES, tools=tools, add_generation_prompt=True, **analysis.thinking_kwargs(True))
    return engine.tokenize(prompt, parse_special=True)


@dataclass
class Run:
    ids: list[int]
    text: str  # detokenized with special tokens kept, as the parser reads it
    stats: GenerationStats


def generate(engine: Engine, prompt: list[int], seed: int, grammar: GrammarSpec | None,
             on_token: Callable[[int], None] | None = None, until: Callable[[], bool] | None = None) -> Run:
    """Sample up to MAX_TOKENS (or until `until()` holds after a token); `on_token` sees each id."""
    from autoparser.llama.engine import GenerationStats, SamplingParams

    stats = GenerationStats()
    ids = []
    tokens = engine.generate(prompt, MAX_TOKENS, SamplingParams(temperature=1.0, seed=seed),
                             grammar=grammar, stats=stats)
    with closing(tokens):  # frees the engine at once when stopped early
        for token in tokens:
            ids.append(token.token_id)
            if on_token is not None:
                on_token(token.token_id)
            if until is not None and until():
                break
    return Run(ids, engine.detokenize(ids, special=True), stats)


def call_problems(message: dict[str, Any], checks: dict[str, Any] = VALIDATORS) -> list[str]:
    """Why the parsed message is not exactly one schema-valid call ([] when it is)."""
    calls = message["tool_calls"]
    if len(calls) != 1:
        return [f"{len(calls)} tool calls"]
    call = calls[0]
    if call.get("incomplete"):
        return ["the call is incomplete"]
    name = call["function"]["name"]
    if name not in checks:
        return [f"unknown tool {name!r}"]
    arguments = json.loads(call["function"]["arguments"])
    return [f"{name}: {error.message}" for error in checks[name].iter_errors(arguments)]


def utf8_problems(engine: Engine, ids: list[int]) -> list[str]:
    """The output's bytes must be valid UTF-8.

    llama.cpp's grammar decodes token bytes leniently: an overlong sequence such as
    ``E0 90 B3`` counts as one character, which Python (and every JSON reader) decodes as three
    replacement characters, so a ``maxLength`` the grammar enforced no longer holds.
    """
    data = b"".join(engine.token_to_piece(t) for t in ids)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [f"the output is not valid UTF-8 ({exc.reason} at {data[exc.start:exc.end + 2]!r})"]
    return []


def spelled_specials(engine: Engine, ids: list[int]) -> list[str]:
    """Special-token texts spelled with ordinary tokens (the grammar must make the model emit the token)."""
    specials = set(special_token_ids(engine).values())
    # special tokens become a NUL, which no special token's text contains
    plain = b"".join(b"\0" if t in specials else engine.token_to_piece(t) for t in ids)
    text = plain.decode("utf-8", errors="replace")
    return [special for special in engine.special_tokens if special in text]


# -- 1. tool_choice="required" -------------------------------------------------------------------


def required_failures(engine: Engine, analysis: Analysis, tools: list[dict[str, Any]],
                      seeds: range) -> list[str]:
    """Generate with the "required" grammar for each seed; describe every output that is not
    exactly one schema-valid call written with the real special tokens."""
    result = grammar_for(engine, analysis, "required", tools)
    assert result.warnings == []
    spec = grammar_spec(engine, result)
    prompt = prompt_tokens(engine, analysis, tools)
    parser = analysis.parser(tools=tools, thinking=True, parallel_tool_calls=False, tool_choice="required")
    checks = validators(tools)
    # reasoning ends with its end token, or where the calls begin (their opening special token)
    closers = {engine.token_id(m.strip()) for m in (analysis.reasoning.end, *analysis.triggers[:1]) if m.strip()}
    closers.discard(None)
    starts_in_reasoning = analysis.reasoning.forced_open and analysis.thinking_enabled(True)
    failures = []
    for seed in seeds:
        run = generate(engine, prompt, seed, spec)
        message = parser.parse(run.text)
        problems = utf8_problems(engine, run.ids) + call_problems(message, checks)
        if run.stats.finish_reason != "stop":
            problems.append(f"finish_reason {run.stats.finish_reason!r}")
        if (message["content"] or "").strip():
            problems.append("content beside a required call")
        problems += [f"{t!r} spelled as text" for t in spelled_specials(engine, run.ids)]
        if starts_in_reasoning:  # a real special token must close it
            if closers and not closers.intersection(run.ids):
                problems.append("reasoning not closed by a special token")
            if message["reasoning_content"] is None or len(message["reasoning_content"]) > FREE_TEXT_LIMIT:
                problems.append("reasoning missing or longer than the grammar allows")
        if problems:
            failures.append(f"seed {seed}: {problems}\n  output: {run.text!r}\n  parsed: {message}")
    return failures


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_required_generation_gives_schema_valid_calls(tiny_engine: Engine, case_id: str) -> None:
    """20 seeds of grammar-constrained generation: every output parses to one valid call."""
    failures = required_failures(tiny_engine, analysis_for(case_id, tiny_engine), TOOLS, SEEDS)
    assert not failures, f"{len(failures)}/{len(SEEDS)} seeds failed:\n" + "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["deepseek-v3.1", "deepseek-r1"])
def test_required_generation_with_unbounded_strings_and_rich_schemas(tiny_engine: Engine, case_id: str) -> None:
    """The shared grammar-test tools (patterns, maps, nullable numbers, mixed enums, a tool
    without arguments, strings without maxLength): `free_text_limit` bounds every free string,
    so even these end, and the calls still validate."""
    failures = required_failures(tiny_engine, analysis_for(case_id, tiny_engine), FIXTURE_TOOLS, range(4))
    assert not failures, "\n".join(failures)


# -- 2. tool_choice="auto": lazy grammar ---------------------------------------------------------


class Spelled(str):
    """A steering target written with ordinary tokens even where it is one special token."""


@dataclass
class Steering:
    """Steers a random model toward given texts with a logit bias, the way a trained model "decides".

    A random model essentially never writes a tool-call trigger by itself. The engine has no
    ``logit_bias`` option, so this wraps the engine's read of the logits (the one place a bias can
    enter before sampling) and adds `bias` to the next token of the current target text. Each
    phase lets `free` tokens through unsteered first, then steers token by token until its target
    has been emitted; after the last phase nothing is steered. The bias is applied the same way
    with and without a grammar, and a lazy grammar only looks at tokens from the trigger on, so
    the bias never helps a token past the grammar: once the trigger is complete the bias is off.
    """

    engine: Engine
    phases: list[tuple[int, str]]  # (unsteered tokens, target text)
    bias: float = 50.0
    targets: list[list[int]] = field(init=False)
    phase: int = 0
    free_seen: int = 0
    progress: int = 0
    seen: int = 0
    done_at: int | None = None  # tokens emitted when the last target was complete

    def __post_init__(self) -> None:
        self.targets = [self.token_ids(text) for _, text in self.phases]

    def token_ids(self, text: str) -> list[int]:
        if isinstance(text, Spelled):
            return self.engine.tokenize(text, parse_special=False)
        single = self.engine.token_id(text)
        return [single] if single is not None else self.engine.tokenize(text, parse_special=False)

    def wanted(self) -> int | None:
        if self.phase >= len(self.phases) or self.free_seen < self.phases[self.phase][0]:
            return None
        return self.targets[self.phase][self.progress]

    def observe(self, token: int) -> None:
        self.seen += 1
        wanted = self.wanted()
        if self.phase >= len(self.phases):
            return
        if wanted is None:
            self.free_seen += 1
            return
        self.progress = self.progress + 1 if token == wanted else 0
        if self.progress == len(self.targets[self.phase]):
            self.phase, self.free_seen, self.progress = self.phase + 1, 0, 0
            if self.phase == len(self.phases):
                self.done_at = self.seen

    @contextmanager
    def active(self) -> Iterator[Steering]:
        read = self.engine._logits

        def biased(*row: int) -> np.ndarray:  # the batch row whose logits are read
            logits = np.array(read(*row), dtype=np.float32)
            wanted = self.wanted()
            if wanted is not None:
                logits[wanted] += self.bias
            return logits

        self.engine._logits = biased  # type: ignore[method-assign]
        try:
            yield self
        finally:
            del self.engine._logits


def steered_runs(engine: Engine, analysis: Analysis, phases: list[tuple[int, str]], spec: GrammarSpec,
                 seed: int) -> tuple[Run, Steering, Run, Steering]:
    """The same seed and steering without a grammar (up to the last target), then with the lazy grammar.

    The prompt is decoded once beforehand; each run then reuses that cache and decodes only the
    prompt's last token, so both see bit-identical logits (and the prompt is not decoded twice).
    """
    prompt = prompt_tokens(engine, analysis)
    generate(engine, prompt, seed, None, until=lambda: True)
    free, free_steer = _steered(engine, prompt, phases, None, seed)
    lazy, lazy_steer = _steered(engine, prompt, phases, spec, seed)
    return free, free_steer, lazy, lazy_steer


def _steered(engine: Engine, prompt: list[int], phases: list[tuple[int, str]], spec: GrammarSpec | None,
             seed: int) -> tuple[Run, Steering]:
    steering = Steering(engine, phases)
    until = (lambda: steering.done_at is not None) if spec is None else None
    with steering.active():
        run = generate(engine, prompt, seed, spec, on_token=steering.observe, until=until)
    return run, steering


def reasoning_phases(analysis: Analysis, inside: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Phases that write reasoning (containing `inside`) and close it, where the template reasons."""
    r = analysis.reasoning
    if not (analysis.thinking_enabled(True) and r.mode != "none" and r.end.strip()):
        return []
    opening = [] if r.forced_open or not r.start.strip() else [(0, r.start.strip())]
    return [*opening, *inside, (4, r.end.strip())]


def squeeze(text: str | None) -> str:
    return "".join((text or "").split())


def check_lazy_runs(engine: Engine, analysis: Analysis, free: Run, free_steer: Steering, lazy: Run,
                    lazy_steer: Steering, trigger: str) -> list[str]:
    """What is wrong with a lazy run, compared with the same run without a grammar ([] if nothing)."""
    problems = []
    end = lazy_steer.done_at
    if end is None or free_steer.done_at != end or lazy.ids[:end] != free.ids[:end]:
        return ["the text up to the trigger differs from the unconstrained run"]
    if lazy.stats.finish_reason != "stop":
        problems.append(f"finish_reason {lazy.stats.finish_reason!r}")
    head = lazy.text[: lazy.text.rindex(trigger.strip())]
    parser = analysis.parser(tools=TOOLS, thinking=True, parallel_tool_calls=False, tool_choice="auto")
    message = parser.parse(lazy.text)
    # free text may be any bytes the model samples; from the trigger on the grammar answers for them
    problems += utf8_problems(engine, lazy.ids[end:]) + call_problems(message)
    # nothing before the trigger is lost: it is reasoning or content, markers aside
    r = analysis.reasoning
    expected = head
    for marker in (r.start.strip(), r.end.strip()):
        if marker:
            expected = expected.replace(marker, "", 1)
    if squeeze(message["reasoning_content"]) + squeeze(message["content"]) != squeeze(expected):
        problems.append(f"text before the trigger came back as {message['reasoning_content']!r} / "
                        f"{message['content']!r}")
    if problems:
        problems.append(f"output: {lazy.text!r}\n  parsed: {message}")
    return problems


def trigger_text(analysis: Analysis) -> str:
    assert analysis.triggers, "the analysis names no trigger"
    return analysis.triggers[0]


LAZY_RUNS = 4  # seeds per template whose steered run reaches the trigger
LAZY_SEEDS = range(10)  # seeds scanned for those runs (the free text may end the output first)


def lazy_seed_results(engine: Engine, analysis: Analysis, phases: list[tuple[int, str]],
                      spec: GrammarSpec, trigger: str) -> tuple[int, list[str]]:
    """Scan seeds until LAZY_RUNS of them reach the end of the steering; (runs checked, failures)."""
    checked, failures = 0, []
    for seed in LAZY_SEEDS:
        free, free_steer, lazy, lazy_steer = steered_runs(engine, analysis, phases, spec, seed)
        if free_steer.done_at is None:  # the model ended (end-of-generation) before the trigger
            continue
        checked += 1
        problems = check_lazy_runs(engine, analysis, free, free_steer, lazy, lazy_steer, trigger)
        if problems:
            failures.append(f"seed {seed}: " + "\n  ".join(problems))
        if checked == LAZY_RUNS:
            break
    return checked, failures


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_lazy_grammar_free_text_then_valid_call(tiny_engine: Engine, case_id: str) -> None:
    """Free text (reasoning where the template has it, then content), then the trigger, then a call.

    The trigger is reached by steering (see `Steering`); seeds whose free text ends the output
    (end-of-generation) before the trigger are skipped, and LAZY_RUNS of the first LAZY_SEEDS
    must reach it. Up to and including the trigger the
    output is token for token the output of the same seed and steering without any grammar: the
    lazy grammar leaves free text alone. From the trigger on the grammar binds, and the parser
    reads a schema-valid call; everything before the trigger comes back as reasoning or content.
    """
    analysis = analysis_for(case_id, tiny_engine)
    result = grammar_for(tiny_engine, analysis, "auto")
    assert result.lazy and result.trigger_patterns
    trigger = trigger_text(analysis)
    phases = [*reasoning_phases(analysis, []), (6, trigger)]
    checked, failures = lazy_seed_results(tiny_engine, analysis, phases, grammar_spec(tiny_engine, result), trigger)
    assert checked == LAZY_RUNS, f"only {checked} of {len(LAZY_SEEDS)} seeds reached the trigger"
    assert not failures, "\n".join(failures)


REASONING_CASE_IDS = ["deepseek-v3.1", "deepseek-r1", "deepseek-r1-hf", "qwen3", "glm-4.6"]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", REASONING_CASE_IDS)
def test_lazy_trigger_mentioned_inside_reasoning_does_not_fire(tiny_engine: Engine, case_id: str) -> None:
    """The model mentions the trigger inside its reasoning, written as ordinary text: the grammar
    must stay inactive (the run matches the grammar-free run up to the real trigger, after
    ``</think>``), and the call after the real trigger is valid. The mention is reasoning text."""
    analysis = analysis_for(case_id, tiny_engine)
    assert analysis.thinking_enabled(True) and analysis.reasoning.mode != "none"
    result = grammar_for(tiny_engine, analysis, "auto")
    trigger = trigger_text(analysis)
    phases = [*reasoning_phases(analysis, [(2, Spelled(trigger))]), (3, trigger)]
    checked, failures = lazy_seed_results(tiny_engine, analysis, phases, grammar_spec(tiny_engine, result), trigger)
    assert checked == LAZY_RUNS, f"only {checked} of {len(LAZY_SEEDS)} seeds reached the trigger"
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["deepseek-v3.1", "deepseek-r1"])
def test_lazy_trigger_token_inside_reasoning_starts_the_calls(tiny_engine: Engine, case_id: str) -> None:
    """The model writes the calls-begin special token before ``</think>``: that ends the
    reasoning, as the parser reads it, so the grammar fires there. The run matches the
    grammar-free run up to the token, the call after it is valid, and the text before it comes
    back as reasoning."""
    analysis = analysis_for(case_id, tiny_engine)
    result = grammar_for(tiny_engine, analysis, "auto")
    trigger = trigger_text(analysis)
    assert result.trigger_words == [trigger.strip()]
    r = analysis.reasoning
    opening = [] if r.forced_open or not r.start.strip() else [(0, r.start.strip())]
    phases = [*opening, (4, trigger)]
    checked, failures = lazy_seed_results(tiny_engine, analysis, phases, grammar_spec(tiny_engine, result), trigger)
    assert checked == LAZY_RUNS, f"only {checked} of {len(LAZY_SEEDS)} seeds reached the trigger"
    assert not failures, "\n".join(failures)


# -- 3. grammar and parser agree (sampled sentences, no model) ------------------------------------


SAMPLES = 40


def sampled_outputs(analysis: Analysis, tools: list[dict[str, Any]], tool_choice: str, thinking: bool,
                    lazy: bool, seed: str) -> Iterator[str]:
    """Sentences of the request grammar, with special tokens written as their text."""
    result = build_grammar(analysis, tools, tool_choice=tool_choice, thinking=thinking, lazy=lazy,
                           special_tokens=tiny_vocab_specials()[0])
    grammar = Gbnf(result.gbnf)
    rng = random.Random(seed)
    for _ in range(SAMPLES):
        yield grammar.sample(rng)


@cache
def tiny_vocab_specials() -> tuple[list[str], str, str]:
    """The tiny model's special-token texts, BOS and EOS, from its builder (no model needed)."""
    import tiny_model

    b = tiny_model.builder()
    return [*b.CONTROL_TOKENS, *b.USER_DEFINED_TOKENS], b.BOS_TEXT, b.EOS_TEXT


def plain_analysis(case_id: str) -> Analysis:
    """The case's analysis with the tiny model's BOS/EOS, as the model tests get it."""
    _, bos, eos = tiny_vocab_specials()
    return _analysis(case_id, bos, eos)


TOOL_SETS = {"bounded": TOOLS, "fixture": FIXTURE_TOOLS}


@pytest.mark.parametrize("tool_set", sorted(TOOL_SETS))
@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_grammar_sentences_parse(case_id: str, thinking: bool, tool_set: str) -> None:
    """Every sentence of the "required", lazy "auto", full "auto" and "none" grammars parses:
    calls where the grammar wrote calls (schema-valid), none where it wrote none. Complements
    `test_gbnf_parser_agreement.py` (hand-built analyses) with the analyses of real templates."""
    analysis = plain_analysis(case_id)
    tools = TOOL_SETS[tool_set]
    checks = validators(tools)
    failures = []
    modes = [("required", False), ("auto", True), ("auto", False), ("none", False)]
    for choice, lazy in modes:
        parser = analysis.parser(tools=tools, thinking=thinking, tool_choice=choice)
        seed = f"{case_id}-{tool_set}-{choice}-{lazy}-{thinking}"
        for text in sampled_outputs(analysis, tools, choice, thinking, lazy, seed):
            if lazy:  # the grammar starts at the trigger; free text comes first
                text = lazy_prefix(analysis, thinking) + text
            message = parser.parse(text)
            calls = message["tool_calls"]
            problems = []
            if choice == "none":
                problems = [f"{len(calls)} calls under tool_choice none"] if calls else []
            elif choice == "required" or lazy:
                problems = ["no call"] if not calls else []
            if lazy and (message["content"] or "").strip() != "Let me check.":
                problems.append("the free text is not the content")
            for call in calls:
                name = call["function"]["name"]
                problems += [f"{name}: {e.message}" for e in
                             checks[name].iter_errors(json.loads(call["function"]["arguments"]))]
            if problems:
                failures.append(f"{choice}{' lazy' if lazy else ''}: {problems}: {text!r} -> {message}")
    assert not failures, f"{len(failures)} sentences failed:\n" + "\n".join(failures[:5])


def lazy_prefix(analysis: Analysis, thinking: bool) -> str:
    """Free text a model may write before the trigger: reasoning (where active), then content."""
    r = analysis.reasoning
    if not (analysis.thinking_enabled(thinking) and r.end.strip()):
        return "Let me check.\n"
    opening = "" if r.forced_open or not r.start.strip() else r.start.strip()
    return f"{opening}Thinking it over.{r.end.strip()}\nLet me check.\n"


# -- grammars compile on the tiny vocabulary ----------------------------------------------------


@pytest.mark.parametrize("choice", ["required", "auto", "none"])
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_grammars_with_token_references_compile_on_the_vocab(tiny_engine: Engine, case_id: str,
                                                             choice: str) -> None:
    """Special tokens referenced by text (``<think>``) and by id (``<[id]>``) both resolve."""
    from autoparser.llama.grammar_check import validate_gbnf

    analysis = analysis_for(case_id, tiny_engine)
    by_text = build_grammar(analysis, FIXTURE_TOOLS, tool_choice=choice, thinking=True,
                            special_tokens=sorted(tiny_engine.special_tokens))
    by_id = build_grammar(analysis, FIXTURE_TOOLS, tool_choice=choice, thinking=True,
                          special_tokens=special_token_ids(tiny_engine))
    validate_gbnf(by_text.gbnf, vocab=tiny_engine)
    validate_gbnf(by_id.gbnf, vocab=tiny_engine)
    assert by_text.warnings == by_id.warnings == []
