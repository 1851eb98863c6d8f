"""Generated grammars through the real llama.cpp runtime, on the tiny DeepSeek model.

Token references resolve against the model's vocabulary, and constrained generation from random
weights yields outputs the parser turns into schema-valid calls (the tiny model's noise never
chooses to stop, so free text is capped with `free_text_limit`).
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from gbnf_fixtures import DS_SPECIALS, TOOLS, deepseek_r1, deepseek_v31

from autoparser.generators.gbnf import build_grammar

pytest_plugins = ["tiny_model"]

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
PROMPT = "<｜begin▁of▁sentence｜><｜User｜>Plan a trip<｜Assistant｜><think>"


@pytest.mark.parametrize("make", [deepseek_v31, deepseek_r1], ids=["v3.1", "r1"])
@pytest.mark.parametrize("choice", ["required", "auto", "none"])
def test_grammars_with_token_references_compile_on_the_vocab(tiny_engine, make, choice: str) -> None:  # type: ignore[no-untyped-def]
    from autoparser.llama.grammar_check import validate_gbnf

    analysis = make()
    specials = {t: tiny_engine.token_id(t) for t in DS_SPECIALS}
    assert all(v is not None for v in specials.values())
    by_text = build_grammar(analysis, TOOLS, tool_choice=choice, thinking=True, special_tokens=DS_SPECIALS)
    by_id = build_grammar(analysis, TOOLS, tool_choice=choice, thinking=True, special_tokens=specials)
    validate_gbnf(by_text.gbnf, vocab=tiny_engine)
    validate_gbnf(by_id.gbnf, vocab=tiny_engine)
    assert by_text.warnings == by_id.warnings == []


@pytest.mark.parametrize("seed", range(4))
def test_required_generation_parses_to_valid_calls(tiny_engine, seed: int) -> None:  # type: ignore[no-untyped-def]
    from autoparser.llama.engine import GrammarSpec, SamplingParams

    analysis = deepseek_v31()
    result = build_grammar(analysis, TOOLS, tool_choice="required", thinking=True, parallel_tool_calls=False,
                           special_tokens=DS_SPECIALS, free_text_limit=24)
    prompt = tiny_engine.tokenize(PROMPT)
    tokens = list(tiny_engine.generate(prompt, 600, SamplingParams(temperature=1.0, seed=seed),
                                       grammar=GrammarSpec(gbnf=result.gbnf)))
    ids = [t.token_id for t in tokens]
    assert tiny_engine.token_id("</think>") in ids  # the real special tokens, not their spelling
    assert tiny_engine.token_id("<｜tool▁calls▁begin｜>") in ids
    text = "".join(t.text for t in tokens)
    message = analysis.parser(tools=TOOLS, thinking=True, tool_choice="required").parse(text)
    assert len(message["tool_calls"]) == 1, text
    call = message["tool_calls"][0]
    assert not call.get("incomplete"), text
    jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])
