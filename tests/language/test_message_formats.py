"""Structures learned by analysis, on the project's own fixtures (syntaxes no real model uses) and
on the real templates that write them.

* message formats: a reply as several messages, each header naming reasoning, answer or a call
  (`colon_messages.jinja`; gpt-oss's channels, muse-glimmer's recipients);
* compound markers: a marker, a word and a marker read as one (`compound_brackets.jinja`; Kimi-K3);
* nested values in tagged arguments: the argument markup nested, or JSON with the template's own
  string quote and bare keys (`nested_brackets.jinja`, `section_quotes.jinja`; MiniMax-M3, Gemma 4).
"""

from __future__ import annotations

import json

import corpora
import pytest
from analyses import streamed_in_random_chunks, whole_checked_by_streams
from corpora import llamacpp_templates
from test_analyze_fixtures import analyze_fixture
from unplaced import lost_letters, marker_texts

import autoparser

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "options": {"type": "object"},
    "places": {"type": "array"}}}}}]


def template(name: str):
    return autoparser.load(str(next(p for p in llamacpp_templates() if p.name == name)))


def streamed(parser, text: str, seed: int) -> dict:
    return streamed_in_random_chunks(parser, text, seed, largest=5)


def summary(message: dict) -> tuple:
    return (message["reasoning_content"], message["content"],
            [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]])


def same_streamed(parser, text: str) -> tuple:
    whole = summary(parser.parse(text))
    for seed in range(10):
        assert summary(streamed(parser, text, seed)) == whole, (text, seed)
    return whole


# -- message formats --------------------------------------------------------------------------------


def test_message_format_is_learned_from_the_renders() -> None:
    m = analyze_fixture("colon_messages.jinja").messages
    assert (m.body_start, m.separator, m.opener) == ("::say::", "::next::::turn:: bot", "::turn:: bot")
    assert (m.reasoning_header.strip(), m.content_header.strip(), m.call_header.strip()) == (
        "for=notes", "for=reader", "for=tool:{name}")
    assert not m.call_body_named


@pytest.mark.parametrize("text, expected", [
    (" for=notes::say::Hmm.::next::::turn:: bot for=reader::say::Sunny.::done::", ("Hmm.", "Sunny.", [])),
    # header words in another order, or with more words than the template writes
    (" for=notes urgent::say::Hmm.::next::::turn:: bot for=tool:get_weather json::say::{\"city\": \"Oslo\"}::done::",
     ("Hmm.", None, [("get_weather", {"city": "Oslo"})])),
    # two calls, each its own message
    (" for=tool:get_weather::say::{\"city\": \"A\"}::next::::turn:: bot for=tool:get_weather::say::{\"days\": 2}",
     (None, None, [("get_weather", {"city": "A"}), ("get_weather", {"days": 2})])),
    # no header at all: plain text, also before a body marker
    ("Just text, no header.", (None, "Just text, no header.", [])),
    ("Note::say::this", (None, "Note::say::this", [])),
    # a recipient that is no known tool: the message is text
    (" for=tool:unknown::say::{\"x\": 1}::done::", (None, " for=tool:unknown::say::{\"x\": 1}", [])),
])
def test_message_headers_choose_reasoning_answer_or_call(text: str, expected: tuple) -> None:
    parser = analyze_fixture("colon_messages.jinja").parser(tools=TOOLS)
    reasoning, content, calls = same_streamed(parser, text)
    assert (reasoning, (content or "").strip() or None, calls) == (expected[0], (expected[1] or "").strip() or None,
                                                                   expected[2])


def test_real_message_formats_are_recognised() -> None:
    oss = template("openai-gpt-oss-120b.jinja").messages
    assert (oss.body_start, oss.reasoning_header, oss.content_header) == (
        "<|message|>", "<|channel|>analysis", "<|channel|>final")
    assert oss.call_header.strip().startswith("to=functions.{name}")
    muse = template("muse-glimmer.jinja").messages
    assert (muse.reasoning_header.strip(), muse.content_header.strip(), muse.call_header.strip()) == (
        "to=self", "to=user", "to={name}")
    assert muse.call_body_named


def test_gpt_oss_recipient_before_or_after_the_channel() -> None:
    a = template("openai-gpt-oss-120b.jinja")
    parser = a.parser(tools=TOOLS)
    for text in ['<|channel|>analysis<|message|>Think.<|end|><|start|>assistant to=functions.get_weather'
                 '<|channel|>commentary <|constrain|>json<|message|>{"city": "Oslo"}<|call|>',
                 '<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary '
                 'to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>']:
        assert same_streamed(parser, text) == ("Think.", None, [("get_weather", {"city": "Oslo"})])


_GPT_OSS_GARBLED = ('<|channel|>analysis<|message|>Think.<|end|><|start|>assistant to=functions.get_weather'
                    '{header}<|message|>{{"city": "Paris"}}<|call|>')


@pytest.mark.parametrize("header, calls", [
    # the channel's tag garbled (a random code point inside it): no call's header
    ("<|chaXYnnel|>commentary json", []),
    ("<|cha\u2603nnel|>commentary json", []),
    ("<|channel|>commentary json junk<|x|>", []),
    ("<|channel|>commentXary json", []),
    # the headers a call's message is written with: a call, its header markup
    ("<|channel|>commentary json", ["get_weather"]),
    ("<|channel|>commentary <|constrain|>json", ["get_weather"]),
    (" <|constrain|>json", ["get_weather"]),
    ("", ["get_weather"]),
])
@pytest.mark.parametrize("name", ["openai-gpt-oss-120b.jinja", "xinference__gpt-oss.jinja"])
def test_gpt_oss_call_header_the_template_never_writes_is_content(name: str, header: str, calls: list) -> None:
    """After a call's recipient, the header is the template's (a channel tag and word, then the
    content type, which `<|constrain|>` may precede); any other text there makes the message no
    call, as llama.cpp reads none (its header pattern fails), and the message is content kept
    whole, as a call to a tool not offered is: read as a header, it was dropped (`lost`). Found by
    the output fuzzer on the shared corpus (seed 16): `to=functions.get_weather<|cha…nnel|>`."""
    paths = [p for p in corpora.all_templates() if p.name == name]
    if not paths:
        pytest.skip(f"{name} is not in the corpora here")
    analysis = autoparser.load(str(paths[0]))
    parser = analysis.parser(tools=TOOLS, thinking=True)
    text = _GPT_OSS_GARBLED.format(header=header)
    message = whole_checked_by_streams(parser, text)
    assert message["reasoning_content"] == "Think."
    assert [c["function"]["name"] for c in message["tool_calls"]] == calls
    if not calls:
        assert message["content"] == text[text.index("to=functions."):]
    else:
        assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
        assert message["content"] is None


_MUSE_CALL = ('<atem:function_calls>\n<atem:invoke name="{name}">\n<atem:parameter name="city">Paris</atem:parameter>'
              '\n</atem:invoke>\n</atem:function_calls>')


def _muse_lost(analysis, text: str, message: dict) -> str:
    """The letters lost, the markers left out (the reasoning's and the answer's headers among
    them: `to=self<|message|>`, `to=user<|message|>`)."""
    for marker in sorted(marker_texts(analysis), key=len, reverse=True):
        text = text.replace(marker, " ")
    return "".join(sorted(lost_letters(analysis, text, message).elements()))


@pytest.mark.parametrize("text, calls, content", [
    # a second message to a tool not offered: kept whole, its header naming the recipient included
    (" to=get_weather<|message|>" + _MUSE_CALL.format(name="get_weather") + "<|eom|><|start|>assistant to=search_docs"
     "<|message|>" + _MUSE_CALL.format(name="search_docs"),
     ["get_weather"], "to=search_docs<|message|>" + _MUSE_CALL.format(name="search_docs")),
    (" to=search_docs<|message|>" + _MUSE_CALL.format(name="search_docs"),
     [], "to=search_docs<|message|>" + _MUSE_CALL.format(name="search_docs")),
    # the answer's and the reasoning's recipients, and a call to a tool offered
    (" to=self<|message|>Think.<|eom|><|start|>assistant to=user<|message|>Hello.", [], "Hello."),
    (" to=get_weather<|message|>" + _MUSE_CALL.format(name="get_weather"), ["get_weather"], None),
    # a call cut off before its arguments start: the call's header is not lost
    (' to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter',
     ["get_weather"], "<atem:parameter"),
])
def test_muse_glimmer_message_to_a_recipient_not_offered_keeps_its_header(text: str, calls: list, content) -> None:
    """A recipient header (`to=NAME<|message|>`, the body naming the tool again) that names a tool
    not offered: the message is content kept whole, header and all, as a call to a tool not
    offered is in every format (README) and as a channel the template never writes is; the
    answer's (`to=user`) and the reasoning's (`to=self`) headers are dropped as before. Found by
    the output fuzzer on llama.cpp's templates (seed 11): the recipient's name was lost."""
    analysis = template("muse-glimmer.jinja")
    parser = analysis.parser(tools=TOOLS, thinking=True)
    message = whole_checked_by_streams(parser, text)
    assert [c["function"]["name"] for c in message["tool_calls"]] == calls
    assert message["content"] == content
    assert _muse_lost(analysis, text, message) == ""


@pytest.mark.parametrize("text", [
    '<|channel|>analysis<|message|>Run it.<|end|><|start|>assistant to=container.exec'
    '<|channel|>commentary<|message|>python3 -c \'print("hello")\'',
    '<|channel|>analysis<|message|>Run it.<|end|><|start|>assistant<|channel|>commentary to=python '
    '<|constrain|>code<|message|>print("hello")',
])
@pytest.mark.parametrize("tools", [TOOLS, None])
def test_gpt_oss_message_to_a_recipient_that_is_no_tool_keeps_its_body(text: str, tools: list | None) -> None:
    """A built-in recipient the request gave no tool for (llama.cpp drops the message): its body
    is content, nothing the model wrote is lost (README, "Where this departs from a peer")."""
    parser = template("openai-gpt-oss-120b.jinja").parser(tools=tools)
    reasoning, content, calls = same_streamed(parser, text)
    assert (reasoning, calls) == ("Run it.", [])
    assert "print(" in content and "<|" not in content


@pytest.mark.parametrize("text, expected", [
    # a channel the template never writes: the message is the answer, kept whole
    ("<|channel|>foo<|message|>Hello.", (None, "<|channel|>foo<|message|>Hello.")),
    ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>aside<|message|>Hello.",
     ("Think.", "<|channel|>aside<|message|>Hello.")),
    # a channel's word is whole: `analysisE` is no reasoning, `finale` no answer channel
    ("<|channel|>analysisE<|message|>Think.", (None, "<|channel|>analysisE<|message|>Think.")),
    ("<|channel|>finale<|message|>Hello.", (None, "<|channel|>finale<|message|>Hello.")),
    # the channels the template writes: reasoning, the answer, a call's channel with no recipient
    ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello.",
     ("Think.", "Hello.")),
    ("<|channel|>final <|constrain|>json<|message|>{}", (None, "{}")),
    ("<|channel|>commentary<|message|>Checking.", (None, "Checking.")),
])
def test_gpt_oss_channel_words(text: str, expected: tuple) -> None:
    """A message's channel is the word after `<|channel|>`, whole; one the template never
    writes loses nothing: its header stays in the content (README, "Messages and channels")."""
    parser = template("openai-gpt-oss-120b.jinja").parser(tools=TOOLS)
    assert same_streamed(parser, text) == (*expected, [])


@pytest.mark.parametrize("name, text", [
    ("Qwen3-Coder.jinja", "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n"
                          "<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>"),
    ("GLM-4.7-Flash.jinja", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value>"
                            "<arg_key>city</arg_key><arg_value>B</arg_value></tool_call>"),
])
def test_a_key_written_twice(name: str, text: str) -> None:
    """A stream cannot take a sent value back (README): with the tools, each key is read once,
    so the repeat breaks the call (the first value kept, the call incomplete, the repeat content);
    without them both values go out as written and a JSON reader keeps the last."""
    parser = template(name).parser(tools=TOOLS)
    reasoning, content, calls = same_streamed(parser, text)
    assert (reasoning, calls) == (None, [("get_weather", {"city": "A"})]) and "B" in content
    assert parser.parse(text)["tool_calls"][0].get("incomplete")
    untooled = template(name).parser()
    assert same_streamed(untooled, text) == (None, None, [("get_weather", {"city": "B"})])
    assert untooled.parse(text)["tool_calls"][0]["function"]["arguments"].count('"city"') == 2


# -- compound markers -------------------------------------------------------------------------------


def test_compound_markers_are_whole_markers() -> None:
    a = analyze_fixture("compound_brackets.jinja")
    assert (a.reasoning.start, a.reasoning.end, a.reasoning.forced_open) == ("⟦open⟧muse⟦go⟧", "⟦shut⟧muse⟦go⟧", True)
    assert (a.content.start, a.content.end) == ("⟦open⟧say⟦go⟧", "⟦shut⟧say⟦go⟧")
    assert (a.tools.section_start, a.tools.section_end) == ("⟦open⟧tools⟦go⟧", "⟦shut⟧tools⟦go⟧")
    assert a.stop[:2] == ["⟦eot⟧", "⟦shut⟧turn⟦go⟧"]


@pytest.mark.parametrize("text, expected", [
    ("Hmm.⟦shut⟧muse⟦go⟧⟦open⟧say⟦go⟧Hi.⟦shut⟧say⟦go⟧⟦shut⟧turn⟦go⟧⟦eot⟧", ("Hmm.", "Hi.", [])),
    # the answer opened at once: the reasoning the prompt opened was empty
    ("⟦open⟧say⟦go⟧Hi.⟦shut⟧say⟦go⟧⟦shut⟧turn⟦go⟧", (None, "Hi.", [])),
    ("⟦open⟧say⟦go⟧⟦shut⟧say⟦go⟧⟦open⟧tools⟦go⟧⟦open⟧call get_weather⟦go⟧{\"city\": \"Rome\"}⟦shut⟧call⟦go⟧"
     "⟦shut⟧tools⟦go⟧⟦shut⟧turn⟦go⟧", (None, None, [("get_weather", {"city": "Rome"})])),
])
def test_compound_markers_parse(text: str, expected: tuple) -> None:
    parser = analyze_fixture("compound_brackets.jinja").parser(tools=TOOLS)
    assert same_streamed(parser, text) == expected


def test_kimi_k3_sections() -> None:
    a = template("Kimi-K3.jinja")
    assert (a.reasoning.start, a.reasoning.end) == ("<|open|>think<|sep|>", "<|close|>think<|sep|>")
    assert (a.content.start, a.content.end) == ("<|open|>response<|sep|>", "<|close|>response<|sep|>")
    assert "<|close|>message<|sep|>" in a.stop
    # `call tool="f" index="1"` numbers the call but is no id: each call gets its own
    output = ('<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" '
              'index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|>'
              '<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>')
    message = a.parser(tools=TOOLS).parse(output)
    assert summary(message) == (None, None, [("get_weather", {"city": "Oslo"})])
    assert message["tool_calls"][0]["id"].startswith("call_")


# -- nested values ----------------------------------------------------------------------------------

NESTED = {"city": "Paris", "options": {"units": "metric", "hourly": True, "depth": {"level": 2}},
          "places": ["Louvre", 3, {"name": "Orsay"}]}


@pytest.mark.parametrize("fixture, style", [("nested_brackets.jinja", "tags"), ("section_quotes.jinja", "quoted")])
def test_nested_values_round_trip(fixture: str, style: str) -> None:
    a = analyze_fixture(fixture)
    assert a.tools.arg_nested == style
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": NESTED}}]}
    history = [{"role": "user", "content": "Weather?"}]
    prompt = a.render(history, tools=TOOLS, add_generation_prompt=True)
    full = a.render(history + [message], tools=TOOLS, add_generation_prompt=False)
    output = full[len(prompt):]
    parser = a.parser(tools=TOOLS)
    assert same_streamed(parser, output)[2] == [("get_weather", NESTED)]


def test_real_nested_syntaxes_are_confirmed_by_rendering() -> None:
    gemma = template("google-gemma-4-31B-it.jinja").tools
    assert (gemma.arg_nested, gemma.arg_nested_quote) == ("quoted", '<|"|>')
    minimax = template("MiniMax-M3.jinja").tools
    assert (minimax.arg_nested, minimax.arg_nested_item) == ("tags", "item")
    # a value printed as a Python literal (`{'k': 'v'}`, `True`) is read as one: no syntax of its own
    assert template("ByteDance-Seed-OSS.jinja").tools.arg_nested == ""
