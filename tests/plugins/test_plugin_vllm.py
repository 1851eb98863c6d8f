"""The `autoparser` parsers inside the real vLLM, on CPU and without weights.

Each round-trip case (CONTRACT section 6) is rendered through the template, and the model output
is run through the calls vLLM's OpenAI chat server makes for one request: the parser class vLLM
composes from `--tool-call-parser autoparser --reasoning-parser autoparser`, its
`adjust_request`, `set_prompt_token_ids` and `parse` for a whole response, and its
`ChatStreamProcessor` (the serving layer's per-chunk step) for a streamed one, fed token ids and
their detokenized text. Reasoning, content, tool names and arguments must equal what
`autoparser parse` gives for the same output, and call ids must be distinct.

Needs vLLM (about 9 GB): `bash tools/install_vllm.sh` then
`.venv-vllm/bin/python -m pytest -q -m vllm tests/plugins/test_plugin_vllm.py`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from corpora import llamacpp_templates, shared_templates
from engine_tokenizer import write_tokenizer
from plugin_cases import (
    CHUNK_SIZES,
    IN_ANSWER,
    SERVED_REASONING,
    analysis_of,
    cases_of,
    in_answer_analysis,
    markers_of,
    tool_template_params,
)

import autoparser
from autoparser import ReasoningAnalysis
from autoparser.analyzers.probes import Prober
from autoparser.plugins.common import ServedModel
from autoparser.roundtrip import TOOLS, probe_messages, run_case

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm", reason="vLLM is not installed (bash tools/install_vllm.sh)")

from vllm.entrypoints.openai.chat_completion.message_assembly import (  # noqa: E402
    assemble_chat_message_fields,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor  # noqa: E402
from vllm.parser import ParserManager  # noqa: E402
from vllm.plugins import load_general_plugins  # noqa: E402
from vllm.tokenizers import get_tokenizer  # noqa: E402

# what every vLLM process does at start-up: run the `vllm.general_plugins` entry points
load_general_plugins()

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

# (file name, corpus, markers are special tokens): DeepSeek's markers are special tokens in its
# vocabulary; for the others the markers stay ordinary text (several tokens each), so both ways
# of meeting a marker in token ids are exercised.
TEMPLATES = [
    ("deepseek-ai-DeepSeek-V3.1.jinja", "llamacpp", True),
    ("xinference__deepseek-v3-0324-92ebdf26.jinja", "shared", True),
    ("hfjs-e2e__deepseek-ai-DeepSeek-R1.jinja", "shared", True),
    ("Qwen-Qwen3-0.6B.jinja", "llamacpp", False),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "llamacpp", True),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llamacpp", True),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "llamacpp", True),
    ("GLM-4.6.jinja", "llamacpp", False),
    ("Kimi-K2-Instruct.jinja", "llamacpp", True),
    ("Qwen3-Coder.jinja", "llamacpp", False),
]


def _template_path(name: str, corpus: str) -> Path:
    paths = llamacpp_templates() if corpus == "llamacpp" else shared_templates()
    for path in paths:
        if path.name == name:
            return path
    pytest.skip(f"{name} is not in the {corpus} corpus")


_SERVED: dict[str, Any] = {}


def served(name: str, corpus: str, special: bool, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(analysis, vLLM tokenizer, composed parser class) for one template, built once."""
    if name not in _SERVED:
        source = _template_path(name, corpus).read_text(encoding="utf-8")
        analysis = autoparser.analyze(source, bos_token=BOS, eos_token=EOS)
        markers = [m for m in {*analysis.preserved_tokens, analysis.reasoning.start, analysis.reasoning.end,
                               analysis.tools.section_start, analysis.tools.section_end,
                               analysis.tools.call_start, analysis.tools.call_end, *analysis.stop} if m]
        folder = write_tokenizer(tmp_path_factory.mktemp("tokenizer"), source, BOS, EOS,
                                 specials=markers if special else ())
        tokenizer = get_tokenizer(str(folder))
        parser_cls = ParserManager.get_parser(tool_parser_name="autoparser", reasoning_parser_name="autoparser",
                                              enable_auto_tools=True, tokenizer=tokenizer)
        _SERVED[name] = (analysis, tokenizer, parser_cls)
    return _SERVED[name]


def conversation(analysis: Any, case: str) -> tuple[str, str, dict[str, Any], list[dict[str, Any]]] | None:
    """(prompt, output, template kwargs, history) of a round-trip case, or None when not applicable."""
    message = probe_messages()[case]
    result = run_case(analysis, case, message)
    if result.status not in ("pass", "fail"):
        return None
    thinking = True if message.get("reasoning_content") else None
    kwargs = analysis.thinking_kwargs(thinking)
    prober = Prober(analysis.source, analysis.bos_token, analysis.eos_token, base_kwargs=kwargs)
    prober.choose_shape()
    history = prober.history()
    tools = TOOLS if message.get("tool_calls") else None
    prompt = analysis.render(history, tools=tools, add_generation_prompt=True, **kwargs)
    return prompt, result.output, kwargs, history


def chat_request(history: list[dict[str, Any]], kwargs: dict[str, Any], stream: bool) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=history, tools=TOOLS, tool_choice="auto", stream=stream,
                                 chat_template_kwargs=kwargs or None)


def rendered_request(parser_cls: Any, tokenizer: Any, request: ChatCompletionRequest, kwargs: dict[str, Any],
                     prompt_ids: list[int]) -> ChatCompletionRequest:
    """What vLLM's renderer does with the request before the engine sees it."""
    parser = parser_cls(tokenizer, request.tools, model_config=None, chat_template_kwargs=kwargs)
    parser.set_prompt_token_ids(prompt_ids)
    return parser.adjust_request(request=request)


def whole(parser_cls: Any, tokenizer: Any, request: ChatCompletionRequest, kwargs: dict[str, Any],
          prompt_ids: list[int], output: str) -> dict[str, Any]:
    """vLLM's non-streaming path: one parser per choice, `parse`, then the message fields."""
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=kwargs, model_config=None)
    parser.set_prompt_token_ids(prompt_ids)
    output_ids = tokenizer.encode(output, add_special_tokens=False)
    reasoning, content, calls = parser.parse(output, request, enable_auto_tools=True,
                                             model_output_token_ids=output_ids)
    fields = assemble_chat_message_fields(request, reasoning, content, calls, enable_auto_tools=True,
                                          parser_cls=parser_cls)
    return {"reasoning_content": fields.reasoning, "content": fields.content,
            "tool_calls": [call.model_dump() for call in fields.tool_calls or []]}


def token_chunks(tokenizer: Any, text: str, size: int) -> list[tuple[str, list[int]]]:
    """`text` as the engine streams it: groups of `size` token ids with their new text, a group
    growing while its last byte leaves a character unfinished."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    chunks: list[tuple[str, list[int]]] = []
    done_text, start = "", 0
    end = 0
    while end < len(ids):
        end = min(len(ids), end + size)
        decoded = tokenizer.decode(ids[:end], skip_special_tokens=False)
        if decoded.endswith("\ufffd") and end < len(ids):
            continue
        chunks.append((decoded[len(done_text):], ids[start:end]))
        done_text, start = decoded, end
    return chunks


def streamed(parser_cls: Any, tokenizer: Any, request: ChatCompletionRequest, kwargs: dict[str, Any],
             prompt_ids: list[int], output: str, size: int) -> dict[str, Any]:
    """vLLM's streaming path: `ChatStreamProcessor.step` per engine chunk; the deltas merged as a
    client merges them."""
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=kwargs, model_config=None)
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=parser_cls)
    chunks = token_chunks(tokenizer, output, size)
    reasoning, content = [], []
    calls: dict[int, dict[str, Any]] = {}
    for number, (text, ids) in enumerate(chunks):
        last = number == len(chunks) - 1
        step = processor.step(text, ids, "stop" if last else None, prompt_ids)
        delta = step.delta
        if delta is None:
            continue
        reasoning.append(delta.reasoning or "")
        content.append(delta.content or "")
        for call in delta.tool_calls or []:
            if call.index not in calls:
                assert call.id and call.type == "function" and call.function and call.function.name, call
                calls[call.index] = {"id": call.id, "type": "function",
                                     "function": {"name": call.function.name, "arguments": ""}}
            else:
                assert call.id is None and (call.function is None or not call.function.name), call
            if call.function and call.function.arguments:
                calls[call.index]["function"]["arguments"] += call.function.arguments
    return {"reasoning_content": "".join(reasoning) or None, "content": "".join(content) or None,
            "tool_calls": [calls[i] for i in sorted(calls)]}


def assert_same(got: dict[str, Any], expected: dict[str, Any], output: str) -> None:
    assert (got["reasoning_content"] or None) == expected["reasoning_content"]
    assert (got["content"] or None) == expected["content"]
    assert [c["function"]["name"] for c in got["tool_calls"]] == [c["function"]["name"] for c in expected["tool_calls"]]
    for mine, theirs in zip(got["tool_calls"], expected["tool_calls"], strict=True):
        assert json.loads(mine["function"]["arguments"]) == json.loads(theirs["function"]["arguments"])
    ids = [c["id"] for c in got["tool_calls"]]
    assert all(ids) and len(set(ids)) == len(ids), ids
    for mine, theirs in zip(got["tool_calls"], expected["tool_calls"], strict=True):
        if theirs["id"] in output:  # the format's own id, written by the model, is passed through
            assert mine["id"] == theirs["id"]


@pytest.mark.parametrize("case", sorted(probe_messages()))
@pytest.mark.parametrize("name,corpus,special", TEMPLATES, ids=[t[0].removesuffix(".jinja") for t in TEMPLATES])
def test_plugin_matches_autoparser_parse(name: str, corpus: str, special: bool, case: str,
                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    analysis, tokenizer, parser_cls = served(name, corpus, special, tmp_path_factory)
    found = conversation(analysis, case)
    if found is None:
        pytest.skip("round-trip case not applicable to this template")
    prompt, output, kwargs, history = found
    thinking = True if probe_messages()[case].get("reasoning_content") else None
    expected = analysis.parser(tools=TOOLS, thinking=thinking).parse(output)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    request = rendered_request(parser_cls, tokenizer, chat_request(history, kwargs, False), kwargs, prompt_ids)
    assert_same(whole(parser_cls, tokenizer, request, kwargs, prompt_ids, output), expected, output)
    stream_request = rendered_request(parser_cls, tokenizer, chat_request(history, kwargs, True), kwargs, prompt_ids)
    for size in (1, 3):
        assert_same(streamed(parser_cls, tokenizer, stream_request, kwargs, prompt_ids, output, size), expected,
                    output)


STRICT_TOOLS = [{"type": "function", "function": {**tool["function"], "strict": True}} for tool in TOOLS]


def _normalized(message: dict[str, Any]) -> dict[str, Any]:
    return {"reasoning_content": message["reasoning_content"] or None, "content": message["content"] or None,
            "tool_calls": [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                           for c in message["tool_calls"]]}


def assert_reasoning_tokens(parser_cls: Any, tokenizer: Any, kwargs: dict[str, Any], prompt_ids: list[int],
                            output: str, expected: dict[str, Any], where: str) -> None:
    """The `reasoning_tokens` vLLM's chat server reports (`count_reasoning_tokens` after
    `set_prompt_token_ids`): some where autoparser reads reasoning; where it reads none, at most
    the whitespace of an empty reasoning block."""
    parser = parser_cls(tokenizer, TOOLS, chat_template_kwargs=kwargs, model_config=None)
    parser.set_prompt_token_ids(prompt_ids)
    output_ids = tokenizer.encode(output, add_special_tokens=False)
    counted = parser.count_reasoning_tokens(output_ids)
    if expected["reasoning_content"]:
        assert counted > 0, where
    else:
        blank = sum(not tokenizer.decode([i]).strip() for i in output_ids)
        assert counted <= blank, f"{where}: {counted} reasoning tokens, no reasoning"


def assert_structured_output_gate(parser_cls: Any, tokenizer: Any, kwargs: dict[str, Any], prompt_ids: list[int],
                                  output: str, expected: dict[str, Any], where: str) -> None:
    """Where vLLM's engine starts enforcing structured output (`is_reasoning_end` on the prompt,
    then `is_reasoning_end_streaming` per generated token): not before the reasoning autoparser
    reads is written, and, where it reads none but an answer or a call, somewhere in the output."""
    reasoner = parser_cls(tokenizer, None, chat_template_kwargs=kwargs, model_config=None).reasoning_parser
    output_ids = tokenizer.encode(output, add_special_tokens=False)
    opened_after: int | None = 0 if reasoner.is_reasoning_end(prompt_ids) else None
    ids = list(prompt_ids)
    for count, token in enumerate(output_ids, 1):
        if opened_after is not None:
            break
        ids.append(token)
        if reasoner.is_reasoning_end_streaming(ids, [token]):
            opened_after = len(tokenizer.decode(output_ids[:count], skip_special_tokens=False))
    reasoning = expected["reasoning_content"]
    if reasoning and opened_after is not None:
        assert reasoning in output[:opened_after], f"{where}: gate opened after {output[:opened_after]!r}"
    if not reasoning and (expected["content"] or expected["tool_calls"]):
        assert opened_after is not None, f"{where}: gate never opened"


@pytest.mark.parametrize("path", tool_template_params())
def test_every_tool_template_matches_autoparser_parse(path: Path, tmp_path: Path) -> None:
    """Every tool-capable corpus template (`plugin_cases`, R1-family ones included), its markers
    special tokens: the composed parser, whole and streamed one, three and seven tokens at a
    time, with `include_reasoning` on and off, with tools marked `strict`, with
    `tool_choice="required"`, and with no reasoning parser (the parse reading reasoning as text),
    equals autoparser's parse of the output after the same prompt; and the reasoning tokens
    counted for usage and the structured-output gate agree with that reading."""
    analysis = analysis_of(path)
    folder = write_tokenizer(tmp_path, analysis.source, BOS, EOS, specials=markers_of(analysis))
    tokenizer = get_tokenizer(str(folder))
    composed = ParserManager.get_parser(tool_parser_name="autoparser", reasoning_parser_name="autoparser",
                                        enable_auto_tools=True, tokenizer=tokenizer)
    tool_only = ParserManager.get_parser(tool_parser_name="autoparser", enable_auto_tools=True, tokenizer=tokenizer)
    as_text = dataclasses.replace(analysis, reasoning=ReasoningAnalysis()).parser(tools=TOOLS)
    served_model = ServedModel("test", analysis)
    for case in cases_of(analysis):
        if case.prompt is None:
            # vLLM renders the prompt first, with OpenAI-shaped tools, and this template renders
            # none with them (transformers' rendering fails alike): vLLM serves no such request
            continue
        kwargs = analysis.thinking_kwargs(case.thinking)
        prompt_ids = tokenizer.encode(case.prompt, add_special_tokens=False)
        history = list(case.history)
        expected = _normalized(analysis.parser(tools=TOOLS, thinking=case.thinking, prompt=case.prompt)
                               .parse(case.output))
        plain = _normalized(as_text.parse(case.output))
        # usage's reasoning tokens and the structured-output gate follow the reasoning the output
        # begins with (a block inside the answer comes after the gate opened)
        leading, _ = served_model.reasoning_split(case.thinking, case.prompt).split(case.output)
        first = dict(expected, reasoning_content=leading or None)
        assert_reasoning_tokens(composed, tokenizer, kwargs, prompt_ids, case.output, first, case.name)
        assert_structured_output_gate(composed, tokenizer, kwargs, prompt_ids, case.output, first, case.name)
        runs = [(composed, {}, expected), (composed, {"include_reasoning": False},
                                           dict(expected, reasoning_content=None)), (tool_only, {}, plain),
                (composed, {"tools": STRICT_TOOLS}, expected)]
        if case.has_calls:
            required = analysis.parser(tools=TOOLS, thinking=case.thinking, prompt=case.prompt, tool_choice="required")
            runs.append((composed, {"tool_choice": "required"}, _normalized(required.parse(case.output))))
        for parser_cls, fields, want in runs:
            where = f"{case.name} {fields} {parser_cls is tool_only}"
            request = ChatCompletionRequest(**{"model": "m", "messages": history, "tools": TOOLS, "tool_choice": "auto",
                                               "chat_template_kwargs": kwargs or None, **fields})
            request = rendered_request(parser_cls, tokenizer, request, kwargs, prompt_ids)
            assert _normalized(whole(parser_cls, tokenizer, request, kwargs, prompt_ids, case.output)) == want, where
            stream_request = request.model_copy(update={"stream": True})
            for size in CHUNK_SIZES:
                got = streamed(parser_cls, tokenizer, stream_request, kwargs, prompt_ids, case.output, size)
                assert _normalized(got) == want, f"{where} {size} tokens"


V31 = TEMPLATES[0]
CALL = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")


def _v31_prompt(analysis: Any, tokenizer: Any, thinking: bool) -> list[int]:
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    prompt = analysis.render(messages, tools=TOOLS, add_generation_prompt=True, thinking=thinking)
    return tokenizer.encode(prompt, add_special_tokens=False)


def test_prompt_decides_where_reasoning_starts(tmp_path_factory: pytest.TempPathFactory) -> None:
    analysis, tokenizer, parser_cls = served(*V31, tmp_path_factory)
    for thinking in (True, False):
        kwargs = {"thinking": thinking}
        parser = parser_cls(tokenizer, None, chat_template_kwargs=kwargs, model_config=None)
        prompt_ids = _v31_prompt(analysis, tokenizer, thinking)
        assert parser.is_reasoning_end(prompt_ids) is (not thinking)
        request = chat_request([{"role": "user", "content": "Weather in Paris?"}], kwargs, False)
        assert request.resolve_reasoning_ended(parser, prompt_ids) is (not thinking)
    reasoner = parser_cls(tokenizer, None, chat_template_kwargs={"thinking": True}, model_config=None).reasoning_parser
    end = tokenizer.encode("</think>", add_special_tokens=False)
    reasoning = tokenizer.encode("let me see", add_special_tokens=False)
    assert not reasoner.is_reasoning_end_streaming([1, 2, *reasoning], reasoning)
    assert reasoner.is_reasoning_end_streaming([1, 2, *reasoning, *end], end)
    assert reasoner.extract_content_ids([*reasoning, *end, 7, 8]) == [7, 8]
    reasoner.set_prompt_token_ids(_v31_prompt(analysis, tokenizer, True))
    assert reasoner.count_reasoning_tokens([*reasoning, *end, 7, 8]) == len(reasoning)


def test_adjust_request_keeps_special_markers_and_native_tool_choice(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    analysis, tokenizer, parser_cls = served(*V31, tmp_path_factory)
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", named):
        request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Paris?"}], tools=TOOLS,
                                        tool_choice=choice)
        prompt_ids = _v31_prompt(analysis, tokenizer, False)
        request = rendered_request(parser_cls, tokenizer, request, {}, prompt_ids)
        assert request.skip_special_tokens is False
        assert request.structured_outputs is None  # no JSON-schema forcing: the model's own format
        message = whole(parser_cls, tokenizer, request, {}, prompt_ids, CALL)
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


def test_call_ids_differ_between_requests(tmp_path_factory: pytest.TempPathFactory) -> None:
    analysis, tokenizer, parser_cls = served(*V31, tmp_path_factory)
    prompt_ids = _v31_prompt(analysis, tokenizer, False)
    request = chat_request([{"role": "user", "content": "Paris?"}], {}, False)
    ids = {whole(parser_cls, tokenizer, request, {}, prompt_ids, CALL)["tool_calls"][0]["id"] for _ in range(3)}
    ids |= {streamed(parser_cls, tokenizer, request, {}, prompt_ids, CALL, 2)["tool_calls"][0]["id"]
            for _ in range(3)}
    assert len(ids) == 6


def test_without_a_reasoning_parser_reasoning_stays_in_the_content(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    analysis, tokenizer, _ = served(*V31, tmp_path_factory)
    parser_cls = ParserManager.get_parser(tool_parser_name="autoparser", enable_auto_tools=True, tokenizer=tokenizer)
    prompt_ids = _v31_prompt(analysis, tokenizer, True)
    request = chat_request([{"role": "user", "content": "Paris?"}], {"thinking": True}, False)
    output = "Let me look.</think>Sure." + CALL
    message = whole(parser_cls, tokenizer, request, {"thinking": True}, prompt_ids, output)
    assert message["content"] == "Let me look.</think>Sure."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    streamed_message = streamed(parser_cls, tokenizer, request, {"thinking": True}, prompt_ids, output, 2)
    assert streamed_message["content"] == "Let me look.</think>Sure."


def test_plugin_import_is_cheap() -> None:
    import subprocess
    import sys

    code = ("import sys, autoparser.plugins.vllm; "
            "print(sorted(m for m in sys.modules if m.startswith(('vllm', 'autoparser.analyzers', "
            "'autoparser.plugins.vllm_parsers'))))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _post(port: int, path: str, body: dict[str, Any]) -> Any:
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def test_render_server_end_to_end(tmp_path: Path) -> None:
    """`vllm launch render` (no GPU) with the README's parser flags, on a folder holding only
    config.json and the tokenizer: render a thinking request, derender the model's ids whole and
    streamed."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    source = _template_path(*V31[:2]).read_text(encoding="utf-8")
    analysis = autoparser.analyze(source, bos_token=BOS, eos_token=EOS)
    folder = write_tokenizer(tmp_path / "model", source, BOS, EOS, specials=analysis.preserved_tokens)
    port = _free_port()
    vllm_cli = Path(sys.executable).with_name("vllm")
    command = [str(vllm_cli), "launch", "render", str(folder), "--host", "127.0.0.1", "--port", str(port),
               "--tool-call-parser", "autoparser", "--reasoning-parser", "autoparser", "--enable-auto-tool-choice"]
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                              env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "render server did not start in 240 s"
                time.sleep(1)
        chat = {"model": str(folder), "messages": [{"role": "user", "content": "Weather in Paris?"}],
                "tools": TOOLS, "chat_template_kwargs": {"thinking": True}}
        rendered = _post(port, "/v1/chat/completions/render", chat)
        assert rendered["sampling_params"]["skip_special_tokens"] is False
        assert rendered["reasoning_ended"] is False
        tokenizer = get_tokenizer(str(folder))
        output = "The user wants the weather.</think>Let me check." + CALL
        ids = tokenizer.encode(output, add_special_tokens=False) + [tokenizer.eos_token_id]
        whole_answer = _post(port, "/v1/chat/completions/derender", {
            "generate_response": {"choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}]},
            "prompt_token_ids": rendered["token_ids"], "chat_request": chat})
        message = whole_answer["choices"][0]["message"]
        assert (message["reasoning"], message["content"]) == ("The user wants the weather.", "Let me check.")
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
            ("get_weather", {"location": "Paris"})]
        assert whole_answer["choices"][0]["finish_reason"] == "tool_calls"
        state, reasoning, content, arguments = None, "", "", ""
        for start in range(0, len(ids), 3):
            last = start + 3 >= len(ids)
            body: dict[str, Any] = {
                "stream": True, "prompt_token_ids": rendered["token_ids"], "chat_request": {**chat, "stream": True},
                "generate_chunk": {"choices": [{"index": 0, "token_ids": ids[start:start + 3],
                                                "finish_reason": "stop" if last else None}]}}
            if state is not None:
                body["stream_state"] = state
            answer = _post(port, "/v1/chat/completions/derender", body)
            state = answer["stream_state"]
            for choice in (answer.get("chunk") or {}).get("choices", []):
                delta = choice.get("delta") or {}
                reasoning += delta.get("reasoning") or ""
                content += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    arguments += (call.get("function") or {}).get("arguments") or ""
        assert (reasoning, content, json.loads(arguments)) == (
            "The user wants the weather.", "Let me check.", {"location": "Paris"})
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_structured_output_gate_for_a_model_that_opens_reasoning_itself(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Qwen3 writes `<think>` itself (several tokens here): the gate waits for its end, and opens
    at once when the output starts with an answer instead."""
    analysis, tokenizer, parser_cls = served(*TEMPLATES[3], tmp_path_factory)
    prompt = analysis.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)

    def gate(output: str) -> list[bool]:
        reasoner = parser_cls(tokenizer, None, chat_template_kwargs={}, model_config=None).reasoning_parser
        assert reasoner.is_reasoning_end(prompt_ids) is False
        ids, steps = list(prompt_ids), []
        for token in tokenizer.encode(output, add_special_tokens=False):
            ids.append(token)
            steps.append(reasoner.is_reasoning_end_streaming(ids, [token]))
        return steps

    thinking = gate("<think>\nhm\n</think>\n\nHello")
    ended_at = thinking.index(True)
    assert not any(thinking[:ended_at])
    assert len(tokenizer.decode(tokenizer.encode("<think>\nhm\n</think>", add_special_tokens=False)[: ended_at + 1])) \
        == len("<think>\nhm\n</think>")
    assert gate("Hello there")[0] is True


@pytest.mark.parametrize("name,output,thinking,reasoning,content", IN_ANSWER,
                         ids=[f"{n.removesuffix('.jinja')}-{i}" for i, (n, *_) in enumerate(IN_ANSWER)])
def test_reasoning_inside_the_answer_is_reasoning(name: str, output: str, thinking: bool | None, reasoning: str,
                                                   content: str, tmp_path: Path) -> None:
    """A reasoning block written inside the answer, after answer text or reopened after calls,
    served as autoparser parses it: its text in the reasoning field, its markers nowhere, the
    content without it; whole and streamed one, three and seven tokens at a time, with tools and
    (outputs with no call) without; with `include_reasoning` off, no reasoning at all."""
    analysis = in_answer_analysis(name)
    folder = write_tokenizer(tmp_path, analysis.source, BOS, EOS, specials=markers_of(analysis))
    tokenizer = get_tokenizer(str(folder))
    composed = ParserManager.get_parser(tool_parser_name="autoparser", reasoning_parser_name="autoparser",
                                        enable_auto_tools=True, tokenizer=tokenizer)
    kwargs = analysis.thinking_kwargs(thinking)
    history = [{"role": "user", "content": "What is the weather in Paris?"}]
    runs: list[tuple[dict[str, Any], Any]] = [({"tools": TOOLS, "tool_choice": "auto"}, TOOLS)]
    if "get_weather" not in output:
        runs.append(({}, None))  # no tools: vLLM's tool choice is then "none"
    for fields, tools in runs:
        prompt = analysis.render(history, tools=tools, add_generation_prompt=True, **kwargs)
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        parser = analysis.parser(tools=tools, thinking=thinking, prompt=prompt,
                                 tool_choice="auto" if tools else "none")
        expected = _normalized(parser.parse(output))
        assert (expected["reasoning_content"], expected["content"]) == (reasoning, content)
        expected["reasoning_content"] = SERVED_REASONING.get(reasoning, reasoning)
        for include in (True, False):
            want = expected if include else dict(expected, reasoning_content=None)
            request = ChatCompletionRequest(model="m", messages=history, chat_template_kwargs=kwargs or None,
                                            include_reasoning=include, **fields)
            request = rendered_request(composed, tokenizer, request, kwargs, prompt_ids)
            where = f"{fields} include_reasoning={include}"
            assert _normalized(whole(composed, tokenizer, request, kwargs, prompt_ids, output)) == want, where
            stream_request = request.model_copy(update={"stream": True})
            for size in CHUNK_SIZES:
                got = streamed(composed, tokenizer, stream_request, kwargs, prompt_ids, output, size)
                assert _normalized(got) == want, f"{where} {size} tokens"
