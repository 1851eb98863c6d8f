"""Our renderer gives the same text as transformers' `apply_chat_template` on real templates.

The tokenizer is built offline (a three-token `tokenizers` word-level model wrapped in
`PreTrainedTokenizerFast`), so nothing is downloaded. Each corpus template renders several
conversations, with and without a generation prompt. A conversation transformers itself cannot
render is skipped for that template; one it renders and we do not is a failure.

One known, deliberate difference is normalized before comparing: where a template prints
tool-call arguments given as a dict, transformers prints the Python repr (`{'city': 'Paris'}`)
and we print JSON (`{"city": "Paris"}`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from corpora import llamacpp_template_params, shared_template_params

from autoparser.render import TemplateRenderError, render_template

BOS, EOS = "<s>", "</s>"

WEATHER_ARGS = {"city": "Paris", "days": 2}
SEARCH_ARGS = {"query": "café prices", "limit": 3}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather forecast for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name."},
            "days": {"type": "integer", "description": "How many days."}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}}},
]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": dict(arguments)}}


CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "system_user": ([{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Hello there"}], None),
    "user": ([{"role": "user", "content": "What is 2+2?"}], None),
    "multi_turn": ([{"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], None),
    "tools_offered": ([{"role": "system", "content": "Use tools when useful."},
                       {"role": "user", "content": "Weather in Paris?"}], TOOLS),
    "tool_calls": ([{"role": "user", "content": "Weather in Paris, and search café prices."},
                    {"role": "assistant", "content": "",
                     "tool_calls": [_call("call_1", "get_weather", WEATHER_ARGS),
                                    _call("call_2", "search", SEARCH_ARGS)]},
                    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Sunny, 21C"},
                    {"role": "tool", "tool_call_id": "call_2", "name": "search", "content": "About 4 EUR"},
                    {"role": "assistant", "content": "Sunny, and coffee costs about 4 EUR."},
                    {"role": "user", "content": "Thanks"}], TOOLS),
}


def _python_repr_to_json(text: str) -> str:
    """Undo the documented difference: transformers prints dict arguments as a Python repr."""
    for arguments in (WEATHER_ARGS, SEARCH_ARGS):
        text = text.replace(repr(arguments), json.dumps(arguments, ensure_ascii=False))
    return text


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    model = tokenizers.models.WordLevel({"<unk>": 0, BOS: 1, EOS: 2}, unk_token="<unk>")
    return PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(model), bos_token=BOS, eos_token=EOS)


def _transformers_render(tokenizer: Any, source: str, messages: list[dict[str, Any]],
                         tools: list[dict[str, Any]] | None, add_generation_prompt: bool) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tokenizer.apply_chat_template(messages, tools=tools, chat_template=source, tokenize=False,
                                                 add_generation_prompt=add_generation_prompt)
    except Exception:  # whatever transformers cannot render is out of scope
        return None


def compare(tokenizer: Any, path: Path | None) -> None:
    if path is None:
        pytest.skip("corpus unavailable")
    source = path.read_text(encoding="utf-8")
    compared = 0
    mismatches = []
    for name, (messages, tools) in CONVERSATIONS.items():
        for add_generation_prompt in (True, False):
            expected = _transformers_render(tokenizer, source, messages, tools, add_generation_prompt)
            if expected is None:
                continue
            label = f"{name}, add_generation_prompt={add_generation_prompt}"
            try:
                ours = render_template(source, messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                       bos_token=BOS, eos_token=EOS)
            except TemplateRenderError as exc:
                mismatches.append(f"{label}: transformers renders it, we raise: {exc}")
                continue
            compared += 1
            if ours != _python_repr_to_json(expected):
                mismatches.append(f"{label}: output differs\n--- transformers\n{expected!r}\n--- ours\n{ours!r}")
    assert not mismatches, f"{path.name}:\n" + "\n".join(mismatches)
    if compared == 0:
        pytest.skip(f"transformers renders none of the conversations with {path.name}")


@pytest.mark.parametrize("path", llamacpp_template_params())
def test_llamacpp_templates_match_transformers(tokenizer: Any, path: Path | None) -> None:
    compare(tokenizer, path)


@pytest.mark.parametrize("path", shared_template_params())
def test_shared_templates_match_transformers(tokenizer: Any, path: Path | None) -> None:
    compare(tokenizer, path)
