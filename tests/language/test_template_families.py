"""Fixture families for structures a template states in its own way (see `fixtures/templates/`).

Each family is read from its template alone and checked three ways: the probe round trip
(`autoparser.roundtrip`), stream == whole for several chunkings of every round-trip output, and
the streaming hold-back bound for prose (`tools/holdback_report.py`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import analyses
import corpora
import pytest
from analyses import without_generated_ids
from unplaced import losses_at_every_cut, lost_letters, marker_patterns

import autoparser
from autoparser.generators.lark import parse_with_lark
from autoparser.language import policy
from autoparser.language.values import nested_to_json
from autoparser.roundtrip import TOOLS, probe_messages, run_case

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
BOS, EOS = "<s>", "</s>"
FAMILIES = ("catalog_inputs.jinja", "typed_params.jinja", "named_closing.jinja", "id_after_name.jinja",
            "instructed_phrases.jinja", "instructed_wrappers.jinja", "trailing_instructions.jinja",
            "string_switch.jinja", "id_before_name.jinja", "lenticular_words.jinja", "caps_lines.jinja",
            "tab_labels.jinja", "channel_switch.jinja", "line_after_name.jinja",
            "elided_answer.jinja", "xml_children.jinja", "edn_calls.jinja", "indented_block.jinja",
            "instructed_calls.jinja", "id_for_name.jinja", "retrieval_calls.jinja",
            "first_part_content.jinja", "tail_switch.jinja", "worded_channel.jinja",
            "worded_channel_opened.jinja", "typographic_quotes.jinja")
# the conversation does not start with the prompt (a block follows the last reply): no probe round trip
NO_ROUND_TRIP = {"trailing_instructions.jinja"}
# the model reasons first (unmarked, or in a channel the prompt opens) and the history keeps only the
# answer: no answer-only round trip
REASONS_FIRST = {"elided_answer.jinja", "worded_channel_opened.jinja"}
holdback = corpora.tool_module("holdback_report")


def analyze_family(name: str) -> autoparser.Analysis:
    return autoparser.analyze((FIXTURES / name).read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)


def _streamed(parser, chunks: list[str]) -> dict:  # type: ignore[no-untyped-def]
    stream = parser.stream()
    for chunk in chunks:
        stream.feed(chunk)
    stream.finish()
    return without_generated_ids(stream.message())


@pytest.mark.parametrize("case", sorted(probe_messages()))
@pytest.mark.parametrize("name", FAMILIES)
def test_round_trip_and_stream_equals_whole(name: str, case: str) -> None:
    analysis = analyze_family(name)
    result = run_case(analysis, case, probe_messages()[case])
    assert result.status != "fail", f"{result.cause}\noutput: {result.output!r}\ngot: {result.got}"
    assert result.status == "pass" or case != "content" or name in NO_ROUND_TRIP | REASONS_FIRST
    if result.status != "pass":
        return
    parser = analysis.parser(tools=TOOLS, thinking=result.thinking)
    whole = without_generated_ids(parser.parse(result.output))
    for size in (1, 2, 3, 7):
        chunks = [result.output[i:i + size] for i in range(0, len(result.output), size)]
        assert _streamed(parser, chunks) == whole, f"{size}-character chunks"


@pytest.mark.parametrize("name", FAMILIES)
def test_prose_is_held_at_most_the_bound(name: str) -> None:
    analysis = analyze_family(name)
    for tools in (holdback.TOOLS, None):
        parser = analysis.parser(tools=tools)
        for case in holdback.cases(analysis):
            held, roles = holdback.most_held(parser, case)
            assert held <= policy.HOLD_BOUND, f"{case.name}: {held} characters held ({roles})"


# -- a variable beyond `messages` and `tools` ------------------------------------------------------

def test_variables_the_template_needs_are_found_and_given_at_render_time() -> None:
    analysis = analyze_family("catalog_inputs.jinja")
    assert analysis.template_inputs == {"tool_catalog": "tools_text", "session_label": "text"}
    assert not analysis.warnings
    prompt = analysis.render([{"role": "user", "content": "hi"}], tools=TOOLS, add_generation_prompt=True)
    assert '"get_weather"' in prompt
    restored = autoparser.Analysis.from_dict(analysis.to_dict(), source=analysis.source)
    assert restored.template_inputs == analysis.template_inputs


def test_a_template_needing_no_inputs_records_none() -> None:
    analysis = analyze_family("bare_json.jinja")
    assert analysis.template_inputs == {}
    assert "template_inputs" not in analysis.to_dict()


def test_calls_after_the_word_marker_are_read() -> None:
    parser = analyze_family("catalog_inputs.jinja").parser()
    message = parser.parse('Checking.invoke>>[{"tool": "get_weather", "input": {"location": "Oslo"}}]')
    assert message["content"] == "Checking."
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("get_weather", '{"location": "Oslo"}')]


# -- calls that render only for some inputs a client may send --------------------------------------

def test_calls_written_only_with_documents_are_analyzed_with_a_document() -> None:
    analysis = analyze_family("retrieval_calls.jinja")
    assert analysis.template_inputs == {"documents": "documents"}
    assert any("only when it is given documents" in w for w in analysis.warnings)
    tools = analysis.tools
    assert (tools.format, tools.section_start, tools.section_end) == ("json", "<act>", "</act>")
    assert (tools.name_field, tools.args_field, tools.id_field, tools.array) == ("fn", "with", "ref", True)
    # the plan before the calls is their reasoning
    assert (analysis.reasoning.mode, analysis.reasoning.start, analysis.reasoning.end) == (
        "tools_only", "<plan>", "</plan>")
    history = [{"role": "user", "content": "hi"}]
    assert "<act>" in analysis.render(history, tools=TOOLS)  # a placeholder document opens the branch
    passed = [{"title": "Guide", "text": "Passed by the request."}]
    assert "Passed by the request." in analysis.render(history, tools=TOOLS, documents=passed)
    restored = autoparser.Analysis.from_dict(analysis.to_dict(), source=analysis.source)
    assert restored.template_inputs == analysis.template_inputs


def test_documents_are_left_out_where_calls_render_without_them() -> None:
    source = ("{% for m in messages %}<{{ m.role }}>{{ m.content or '' }}{% for c in m.tool_calls or [] %}"
              "<call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</call>{% endfor %}"
              "<end>{% endfor %}{% if documents %}<docs>{{ documents | tojson }}</docs>{% endif %}"
              "{% if add_generation_prompt %}<assistant>{% endif %}")
    analysis = autoparser.analyze(source)
    assert analysis.tools.supported and analysis.template_inputs == {}


def test_calls_read_through_the_first_content_part_render_with_an_empty_text_part() -> None:
    analysis = analyze_family("first_part_content.jinja")
    assert (analysis.tools.format, analysis.tools.call_start) == ("json", "<|call|>")
    assert (analysis.tools.name_field, analysis.tools.args_field) == ("tool", "args")
    assert not any("does not render tool calls" in w for w in analysis.warnings)


def test_documents_are_named_for_the_client() -> None:
    from autoparser.plugins.common import template_inputs_note

    note = template_inputs_note(analyze_family("retrieval_calls.jinja"))
    assert note is not None and "'documents' (a list of documents" in note


# -- the marker after a key names the value's JSON type ----------------------------------------------

TYPED_OUTPUT = ("[[call f]][[param a as string]]x y[[/param]][[param b as number]]2[[/param]]"
                "[[param c as boolean]]true[[/param]][[param d as array]][1, \"z\"][[/param]]"
                "[[param e as object]]{\"f\": null}[[/param]][[param g as null]]null[[/param]][[/call]]")
TYPED_ARGS = {"a": "x y", "b": 2, "c": True, "d": [1, "z"], "e": {"f": None}, "g": None}


def test_the_type_named_after_each_key_is_found_as_a_hole() -> None:
    tools = analyze_family("typed_params.jinja").tools
    assert (tools.arg_key_end, tools.arg_key_end_json) == (" as string]]", " as {type}]]")


@pytest.mark.parametrize("typed", [True, False])
def test_every_argument_of_every_type_is_read(typed: bool) -> None:
    kinds = {"a": "string", "b": "integer", "c": "boolean", "d": "array", "e": "object", "g": "null"}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {k: {"type": v} for k, v in kinds.items()}}}}] if typed else None
    parser = analyze_family("typed_params.jinja").parser(tools=tools)
    message = parser.parse(TYPED_OUTPUT)
    assert message["content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("f", TYPED_ARGS)]
    assert _streamed(parser, list(TYPED_OUTPUT)) == without_generated_ids(message)


def test_the_grammar_writes_the_type_the_schema_gives() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"c": {"type": "boolean"}, "n": {"type": "integer"}}}}}]
    grammar = analyze_family("typed_params.jinja").gbnf(tools=tools)
    assert 'as boolean]]' in grammar and 'as number]]' in grammar and "as object]]" not in grammar


# -- a closing tag named after the tool ----------------------------------------------------------------

def _calls(message: dict) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


def test_a_closing_tag_named_after_the_tool_closes_that_call() -> None:
    analysis = analyze_family("named_closing.jinja")
    assert (analysis.tools.args_end, analysis.tools.call_end) == ("</{name}>", "")
    text = 'Hi<get_weather>{"location": "Oslo"}</get_weather><search_docs>{"query": "x"}</search_docs>'
    for tools in (TOOLS, None):
        parser = analysis.parser(tools=tools)
        message = parser.parse(text)
        assert message["content"] == "Hi"
        assert _calls(message) == [("get_weather", '{"location": "Oslo"}'), ("search_docs", '{"query": "x"}')]
        assert _streamed(parser, list(text)) == without_generated_ids(message)
    assert "</get_weather>" in analysis.gbnf(tools=TOOLS)


# -- an id between the name and the arguments ----------------------------------------------------------

def test_the_id_after_the_name_may_be_left_out() -> None:
    parser = analyze_family("id_after_name.jinja").parser(tools=TOOLS)
    text = '<<CALL>>get_weather<<ARGS>>{"location": "Oslo"}<<CALL>>search_docs<<ID>>abc123<<ARGS>>{"query": "x"}'
    message = parser.parse(text)
    assert message["content"] is None
    assert _calls(message) == [("get_weather", '{"location": "Oslo"}'), ("search_docs", '{"query": "x"}')]
    assert message["tool_calls"][1]["id"] == "abc123"
    assert _streamed(parser, list(text)) == without_generated_ids(message)


def test_an_id_written_before_the_name_is_read() -> None:
    analysis = analyze_family("id_before_name.jinja")
    assert (analysis.tools.call_start, analysis.tools.name_start, analysis.tools.id_end) == ("[id=", "", "] ")
    text = 'Sure. [id=a1] get_weather {"location": "Oslo"}\n[id=b2] search_docs {"query": "x"}\n'
    for tools in (TOOLS, None):
        parser = analysis.parser(tools=tools)
        message = parser.parse(text)
        assert message["content"] == "Sure."
        assert [(c["id"], c["function"]["name"]) for c in message["tool_calls"]] == [
            ("a1", "get_weather"), ("b2", "search_docs")]
        assert _streamed(parser, list(text)) == without_generated_ids(message)


# -- reasoning and answer marked where the instructions say ----------------------------------------------

PHRASED = "Working notes:\nThe user greets me.\n\nFinal answer:\nHello!"
WRAPPED = "<ponder>The user greets me.</ponder>\n<reply>Hello!</reply>"


@pytest.mark.parametrize("name, text", [("instructed_phrases.jinja", PHRASED), ("instructed_wrappers.jinja", WRAPPED)])
def test_the_markers_the_instructions_name_split_reasoning_from_the_answer(name: str, text: str) -> None:
    analysis = analyze_family(name)
    assert analysis.reasoning.toggle and not analysis.reasoning.default_on
    for thinking in (True, None):
        parser = analysis.parser(thinking=thinking)
        message = parser.parse(text)
        assert (message["reasoning_content"], message["content"]) == ("The user greets me.", "Hello!")
        for size in (1, 2, 5):
            chunks = [text[i:i + size] for i in range(0, len(text), size)]
            assert _streamed(parser, chunks) == without_generated_ids(message)
    assert analysis.parser(thinking=True).parse("Hello!")["content"] == "Hello!"


def test_phrases_are_found_from_the_quoted_instructions() -> None:
    r = analyze_family("instructed_phrases.jinja").reasoning
    assert (r.start, r.end, r.toggle) == ("Working notes:", "Final answer:", "deliberate")


def test_the_second_instructed_pair_wraps_the_answer() -> None:
    a = analyze_family("instructed_wrappers.jinja")
    assert (a.reasoning.start, a.reasoning.end) == ("<ponder>", "</ponder>")
    assert (a.content.mode, a.content.start, a.content.end) == ("wrapped_with_reasoning", "<reply>", "</reply>")


@pytest.mark.parametrize("text, expected", [
    ("Plan it.\n[START OF REPLY]\nHi there.\n[END OF REPLY]", ("Plan it.", "Hi there.", [])),
    ("[START OF REPLY]Hi there.[END OF REPLY]", (None, "Hi there.", [])),
    ("Hi there.", ("Hi there.", None, [])),  # the output starts inside the reasoning asked for first
    ('Plan.\n<calls>[{"name": "get_weather", "arguments": {"location": "Oslo"}}]</calls>',
     ("Plan.", None, [("get_weather", '{"location": "Oslo"}')])),
])
def test_the_wrapper_shown_around_an_elided_answer_ends_the_reasoning(text: str, expected: tuple) -> None:
    analysis = analyze_family("elided_answer.jinja")
    assert (analysis.reasoning.start, analysis.reasoning.end) == ("", "[START OF REPLY]")
    assert (analysis.content.start, analysis.content.end) == ("[START OF REPLY]", "[END OF REPLY]")
    parser = analysis.parser(tools=TOOLS)
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"], _calls(message)) == expected
    for size in (1, 3):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert _streamed(parser, chunks) == without_generated_ids(message)


# -- a block the template writes after every conversation ------------------------------------------------

def test_a_block_after_the_whole_conversation_is_no_part_of_the_reply() -> None:
    analysis = analyze_family("trailing_instructions.jinja")
    tools = analysis.tools
    assert (tools.section_start, tools.section_end) == ("Calls:\n```json\n", "```")
    assert analysis.generation_prompt == "<|turn|>assistant: "
    text = 'Let me see.\nCalls:\n```json\n[{"tool": "get_weather", "args": {"location": "Oslo"}}]\n```'
    for given in (TOOLS, None):
        parser = analysis.parser(tools=given)
        message = parser.parse(text)
        assert message["content"] == "Let me see."
        assert _calls(message) == [("get_weather", '{"location": "Oslo"}')]
        assert _streamed(parser, list(text)) == without_generated_ids(message)


# -- the reasoning's end marker written again after the answer ---------------------------------------------

@pytest.mark.parametrize("text, content", [
    ("«think»plan«/think»Answer.«/think»", "Answer."),  # closing the channel twice: markup
    ("«think»plan«/think»Use «/think» here.", "Use «/think» here."),  # inside the answer: text
])
def test_an_end_marker_written_again_last_is_markup(text: str, content: str) -> None:
    analysis = autoparser.analyze((FIXTURES / "guillemet_json.jinja").read_text(encoding="utf-8"),
                                  bos_token=BOS, eos_token=EOS)
    for tools in (TOOLS, None):
        parser = analysis.parser(tools=tools, thinking=True)
        message = parser.parse(text)
        assert (message["reasoning_content"], message["content"]) == ("plan", content)
        for size in (1, 3):
            assert _streamed(parser, [text[i:i + size] for i in range(0, len(text), size)]) == \
                without_generated_ids(message)


# -- a thinking switch compared with strings ------------------------------------------------------------

def test_a_switch_compared_with_strings_is_found() -> None:
    r = analyze_family("string_switch.jinja").reasoning
    assert (r.toggle, r.toggle_on, r.toggle_off) == ("reasoning_mode", "on", "off")
    assert (r.forced_open, r.closed_when_off, r.default_on) == (True, True, False)


@pytest.mark.parametrize("thinking, text, expected", [
    (True, "plan<|/muse|>Done.", ("plan", "Done.")),  # the prompt opened the block
    (False, "Done.", (None, "Done.")),  # the prompt closed it
    (None, "<|muse|>plan<|/muse|>Done.", ("plan", "Done.")),  # unset: the model opens it itself
    (None, "Done.", (None, "Done.")),
])
def test_each_state_of_the_switch_reads_its_own_prompt(thinking: bool | None, text: str, expected: tuple) -> None:
    analysis = analyze_family("string_switch.jinja")
    prompt = analysis.render([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                             **analysis.thinking_kwargs(thinking))
    parser = analysis.parser(thinking=thinking, prompt=prompt)
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"]) == expected
    assert _streamed(parser, list(text)) == without_generated_ids(message)


# -- a channel opened by a tag and one word, the word left out ------------------------------------------

def test_a_channel_opened_by_a_tag_and_a_word_is_found() -> None:
    r = analyze_family("worded_channel.jinja").reasoning
    assert (r.start, r.end, r.toggle, r.closed_when_off, r.forced_open) == (
        "<|aside>mull", "<aside|>", "ponder", True, False)


def test_a_prompt_that_opens_the_worded_channel_writes_its_whole_start_marker() -> None:
    """The prompt ends with the tag, the word and a line break: the word belongs to the start
    marker, not the reasoning's text."""
    r = analyze_family("worded_channel_opened.jinja").reasoning
    assert (r.start, r.end, r.toggle, r.closed_when_off, r.forced_open) == (
        "<|aside>mull", "<aside|>", "ponder", True, True)


@pytest.mark.parametrize("text, expected", [
    ("plan<aside|>Done.", ("plan", "Done.")),
    ("<|aside>mull\nplan<aside|>Done.", ("plan", "Done.")),  # the model writes the marker again
    ("<|aside>plan<aside|>Done.", ("plan", "Done.")),  # again, its word left out
    ("mull it over<aside|>Done.", ("mull it over", "Done.")),  # the word in the reasoning is text
    ("plan, unfinished", ("plan, unfinished", None)),
])
def test_the_channel_the_prompt_opened_holds_the_reasoning(text: str, expected: tuple) -> None:
    analysis = analyze_family("worded_channel_opened.jinja")
    prompt = analysis.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert prompt.endswith("<|aside>mull\n")
    parser = analysis.parser(tools=TOOLS, prompt=prompt)
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"]) == expected
    assert _streamed(parser, list(text)) == without_generated_ids(message)


CALL = '<|act>{"name": "get_weather", "arguments": {"location": "Oslo"}}<act|>'


@pytest.mark.parametrize("text, expected", [
    ("<|aside>mull\nplan<aside|>Done.", ("plan", "Done.")),  # the word the template writes
    ("<|aside>plan<aside|>Done.", ("plan", "Done.")),  # the word and its line break left out
    ("<|aside>muddled plan<aside|>Done.", ("muddled plan", "Done.")),  # begins like the word, then parts
    ("<|aside>mulled it over<aside|>Done.", ("mulled it over", "Done.")),  # the word, then more of a word
    ("<|aside>mull_it<aside|>Done.", ("mull_it", "Done.")),
    ("<|aside>mull: plan<aside|>Done.", (": plan", "Done.")),  # the whole word, then punctuation
    ("<|aside>mull\n<aside|>Done.", (None, "Done.")),  # empty, worded
    ("<|aside><aside|>Done.", (None, "Done.")),  # empty, the word left out
    ("<|aside>plan, unfinished", ("plan, unfinished", None)),
    ("<|aside>plan<aside|>" + CALL, ("plan", None)),
    ("Done.", (None, "Done.")),
])
@pytest.mark.parametrize("opened", [False, True], ids=["model-opens", "prompt-opened"])
def test_the_channel_word_may_be_left_out(opened: bool, text: str, expected: tuple) -> None:
    """The template writes its reasoning channel as `<|aside>mull` and a line break, and writes that
    tag nowhere else: a model that writes the tag alone opens the same channel, streamed or whole,
    and the word it does write is never reasoning, nor held as such. Where the prompt opened the
    channel, the tag written again first is markup, with its word or without."""
    analysis = analyze_family("worded_channel.jinja")
    prompt = analysis.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    if opened:
        prompt += "<|aside>mull\n"
        expected = ("Done.", None) if text == "Done." else expected  # the prompt's channel holds it
    parser = analysis.parser(tools=TOOLS, prompt=prompt)
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"]) == expected
    assert _calls(message) == ([("get_weather", '{"location": "Oslo"}')] if CALL in text else [])
    for size in (1, 2, 5):
        assert _streamed(parser, [text[i:i + size] for i in range(0, len(text), size)]) == \
            without_generated_ids(message), f"{size}-character chunks"
    if not opened:  # the Lark grammar reads what the parser reads (it knows no prompt: the model opens)
        lark = parse_with_lark(analysis, text, tools=TOOLS)
        assert (lark["reasoning_content"], lark["content"]) == expected


def test_the_written_word_is_held_only_until_it_is_whole() -> None:
    """After the tag, text that may still be the word is held; once the word is whole (it is
    markup) or has parted from it (it is reasoning, as where a word character follows it), the
    reasoning streams as it comes."""
    parser = analyze_family("worded_channel.jinja").parser(tools=TOOLS)
    for body, skipped in (("mull\nplan it", len("mull\n")), ("muddled plan", 0), ("mulled it", 0)):
        stream = parser.stream()
        sent = "".join(d.get("reasoning_content") or "" for d in stream.feed("<|aside>"))
        for at in range(len(body)):
            sent += "".join(d.get("reasoning_content") or "" for d in stream.feed(body[at]))
            read = body[skipped:at + 1] if at >= skipped else ""
            undecided = "mull\n".startswith(body[:at + 1])  # still the word, or reasoning like it
            assert read.startswith(sent) and len(read.rstrip()) - len(sent) <= (at + 1 if undecided else 0), \
                (body, at, sent)
        assert sent == body[skipped:]


# -- a switch that changes the channel the prompt opens, not its markers ---------------------------------

def test_a_switch_naming_the_channel_is_found() -> None:
    a = analyze_family("channel_switch.jinja")
    assert (a.reasoning.toggle, a.reasoning.forced_open, a.reasoning.default_on) == ("muse", True, True)
    assert (a.reasoning.start, a.reasoning.end) == ("<|lane|>ponder<|go|>", "<|shut|>ponder<|go|>")
    assert (a.content.start, a.content.end) == ("<|lane|>speak<|go|>", "<|shut|>speak<|go|>")
    # calls are analyzed where the model closes its reasoning, not the answer channel the prompt opened
    assert (a.tools.section_start, a.tools.section_end) == ("<|lane|>calls<|go|>", "<|shut|>calls<|go|>")


@pytest.mark.parametrize("thinking, text, expected", [
    (True, "plan<|shut|>ponder<|go|>\n<|lane|>speak<|go|>Done.<|shut|>speak<|go|>", ("plan", "Done.")),
    (None, "plan<|shut|>ponder<|go|>\n<|lane|>speak<|go|>Done.<|shut|>speak<|go|>", ("plan", "Done.")),
    (False, "Done.<|shut|>speak<|go|>", (None, "Done.")),  # off: the prompt opened the answer's channel
    (False, '<|shut|>speak<|go|><|lane|>calls<|go|>{"name": "get_weather", "arguments": {"location": "Oslo"}}'
            '<|shut|>calls<|go|>', (None, None)),
])
def test_thinking_off_opens_the_answer_channel(thinking: bool | None, text: str, expected: tuple) -> None:
    analysis = analyze_family("channel_switch.jinja")
    prompt = analysis.render([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                             **analysis.thinking_kwargs(thinking))
    for given in (prompt, None):
        parser = analysis.parser(tools=TOOLS, thinking=thinking, prompt=given)
        message = parser.parse(text)
        assert (message["reasoning_content"], message["content"]) == expected
        assert _calls(message) == ([("get_weather", '{"location": "Oslo"}')] if "calls" in text else [])
        assert _streamed(parser, list(text)) == without_generated_ids(message)


# -- the next valid call after a malformed one -------------------------------------------------------------

@pytest.mark.parametrize("broken", ['{"location": "Paris",}', '{"location": Paris}', '{"location" "Paris"}',
                                    '{"location": "Paris"'])
def test_a_broken_call_does_not_swallow_the_next_one(broken: str) -> None:
    analysis = analyze_family("line_after_name.jinja")
    assert analysis.reasoning.mode == "none"
    text = (f'<<calls>><<call>>get_weather\n{broken}<</call>>'
            '<<call>>get_weather\n{"location": "Oslo"}<</call>><</calls>>')
    parser = analysis.parser(tools=TOOLS)  # lenient; strict keeps a section with a broken call as text
    message = parser.parse(text)
    assert _calls(message)[-1] == ("get_weather", '{"location": "Oslo"}')
    assert "<<call>>" not in (message["content"] or "")
    for size in (1, 4):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert _streamed(parser, chunks) == without_generated_ids(message)


# -- markers that share their first character, in any script -------------------------------------------

def test_markers_sharing_their_first_character_are_cut_whole() -> None:
    analysis = analyze_family("lenticular_words.jinja")
    tools = analysis.tools
    assert (tools.call_start, tools.name_end, tools.call_end, tools.section_start) == ("【调用】", "【参数】", "【结束】", "")
    assert analysis.stop[0] == "【完】"
    text = '好的。【调用】get_weather【参数】{"location": "Oslo"}【结束】【调用】search_docs【参数】{"query": "x"}【结束】'
    for given in (TOOLS, None):
        parser = analysis.parser(tools=given)
        message = parser.parse(text)
        assert message["content"] == "好的。"
        assert _calls(message) == [("get_weather", '{"location": "Oslo"}'), ("search_docs", '{"query": "x"}')]
        assert _streamed(parser, list(text)) == without_generated_ids(message)


# -- markers made of upper-case words on a line of their own ---------------------------------------------

def test_lines_of_upper_case_words_are_markers() -> None:
    analysis = analyze_family("caps_lines.jinja")
    assert (analysis.reasoning.start, analysis.reasoning.end) == ("BEGIN REASONING", "END REASONING")
    assert analysis.stop[0] == "END OF TURN"
    text = "BEGIN REASONING\nThe user greets me. I SAY HI back.\nEND REASONING\nHello, I SAY HI."
    parser = analysis.parser()
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"]) == ("The user greets me. I SAY HI back.",
                                                                  "Hello, I SAY HI.")
    assert _streamed(parser, list(text)) == without_generated_ids(message)


# -- reasoning and answer opened by line labels -----------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("think:\tplan\nmore plan\nsay:\tDone.", ("plan\nmore plan", "Done.")),
    ("say:\tDone.", (None, "Done.")),  # the answer's label stays out of the answer
])
def test_line_labels_mark_reasoning_and_answer(text: str, expected: tuple) -> None:
    analysis = analyze_family("tab_labels.jinja")
    assert (analysis.reasoning.start, analysis.reasoning.end) == ("think:\t", "say:\t")
    parser = analysis.parser()
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"]) == expected
    assert _streamed(parser, list(text)) == without_generated_ids(message)


# -- objects and arrays in the template's own syntax -------------------------------------------------

NESTED_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "options": {"type": "object"},
                                     "places": {"type": "array"}}}}}]
NESTED = {"city": "Paris", "options": {"units": "metric", "hourly": True, "depth": {"level": 2}, "note": None},
          "places": ["Louvre", 3, {"name": "Orsay"}]}


@pytest.mark.parametrize(("name", "style"), [("xml_children.jinja", ("tags", "li", "<", ">", "</{key}>")),
                                             ("edn_calls.jinja", ("bracketed", "", ":", " ", " ")),
                                             ("indented_block.jinja", ("indented", "-", "", ":", "")),
                                             ("sexpr_calls.jinja", ("bracketed", "", "(", "", ""))])
def test_nested_values_in_the_templates_own_syntax_round_trip(name: str, style: tuple) -> None:
    """Child elements named after each member (`<units>metric</units>`, an array's as `<li>`),
    or EDN's `{:units "metric" :depth {:level 2}}` and `["Louvre" 3]`, or a deeper-indented block of
    `units: metric` lines (an array's as `- Louvre` lines), or s-expressions
    (`(obj (units "metric"))`, `(vec "Louvre" 3)`): the syntax is learnt from
    how the template renders an object and an array, and the value comes back as JSON, streamed
    in any chunks as whole."""
    analysis = analyze_family(name)
    t = analysis.tools
    assert (t.arg_nested, t.arg_nested_item, t.arg_nested_start, t.arg_nested_key_end, t.arg_nested_end) == style
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": NESTED}}]}
    history = [{"role": "user", "content": "Weather?"}]
    prompt = analysis.render(history, tools=NESTED_TOOLS, add_generation_prompt=True)
    output = analysis.render(history + [message], tools=NESTED_TOOLS, add_generation_prompt=False)[len(prompt):]
    parser = analysis.parser(tools=NESTED_TOOLS)
    whole = without_generated_ids(parser.parse(output))
    assert [json.loads(c["function"]["arguments"]) for c in whole["tool_calls"]] == [NESTED]
    for size in (1, 2, 3, 7):
        chunks = [output[i:i + size] for i in range(0, len(output), size)]
        assert _streamed(parser, chunks) == whole, f"{size}-character chunks"


def test_strings_between_typographic_quotes_read_back() -> None:
    """`key=“text”` opens a string with a quotation mark and closes it with its counterpart (`”`),
    the separator after it (`, `) is no part of the value's end: strings holding commas, equal
    signs and an opening mark, numbers as JSON; whole == streamed one character at a time."""
    analysis = analyze_family("typographic_quotes.jinja")
    t = analysis.tools
    assert (t.arg_key_end, t.arg_end, t.arg_separator, t.arg_key_end_json) == ("=“", "”", ", ", "=")
    output = "⟦call⟧ get_weather(location=“Paris, x=“1”, days=3)⟦call⟧ get_weather(location=“Oslo”)"
    parser = analysis.parser(tools=TOOLS)
    whole = without_generated_ids(parser.parse(output))
    assert [json.loads(c["function"]["arguments"]) for c in whole["tool_calls"]] == [
        {"location": "Paris, x=“1", "days": 3}, {"location": "Oslo"}]
    assert _streamed(parser, list(output)) == whole


EMPTY = {"places": [], "options": {}, "city": "Paris"}


@pytest.mark.parametrize("name", ["xml_children.jinja", "indented_block.jinja", "yaml_list_calls.jinja"])
@pytest.mark.parametrize(("properties", "expected"), [
    ({"city": {"type": "string"}, "options": {"type": "object"}, "places": {"type": "array"}}, EMPTY),
    # untyped: nothing written cannot tell an empty string from an empty object or array
    ({"city": {"type": "string"}, "options": {}, "places": {}}, {"places": "", "options": "", "city": "Paris"}),
])
def test_an_empty_object_or_array_written_as_nothing_reads_back_by_its_schema(
        name: str, properties: dict, expected: dict) -> None:
    """A template that writes an object or array as its members' or elements' markup alone writes
    an empty one as nothing (`<arg name="places"></arg>`, `  places:` with no block below): an
    argument the schema types as an array or object reads back `[]` or `{}`, an untyped one `""`;
    whole, streamed in any chunks, and as two calls."""
    analysis = analyze_family(name)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": properties}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": EMPTY}}
    message = {"role": "assistant", "content": None, "tool_calls": [call, call]}
    history = [{"role": "user", "content": "Weather?"}]
    prompt = analysis.render(history, tools=tools, add_generation_prompt=True)
    output = analysis.render(history + [message], tools=tools, add_generation_prompt=False)[len(prompt):]
    output = output[:output.rindex(analysis.stop[0])] if analysis.stop and analysis.stop[0] in output else output
    parser = analysis.parser(tools=tools)
    whole = without_generated_ids(parser.parse(output))
    assert [json.loads(c["function"]["arguments"]) for c in whole["tool_calls"]] == [expected, expected]
    for size in (1, 2, 3, 7):
        chunks = [output[i:i + size] for i in range(0, len(output), size)]
        assert _streamed(parser, chunks) == whole, f"{size}-character chunks"


@pytest.mark.parametrize(("raw", "syntax", "expected"), [
    ('{:a "x y" :b [1 2.5 true] :c {}}', (":", " ", " ", ""), {"a": "x y", "b": [1, 2.5, True], "c": {}}),
    ("{a = §p, q§; b = [§r§; null]}", ("", " = ", "; ", "§"), {"a": "p, q", "b": ["r", None]}),
    ('{:a "say \\"hi\\""}', (":", " ", " ", ""), {"a": 'say "hi"'}),
    ('{:a "x" :b}', (":", " ", " ", ""), None),  # a key with no value
    ('{:a "x"', (":", " ", " ", ""), None),  # cut off
    ("plain text", (":", " ", " ", ""), None),
])
def test_a_bracketed_syntax_reads_back_as_json_or_not_at_all(raw: str, syntax: tuple, expected: object) -> None:
    found = nested_to_json(raw, ("bracketed", *syntax))
    assert (json.loads(found) if found is not None else None) == expected



SEXPR = ("bracketed", "(", "", "", "", "(obj", ")", "(vec", ")", ")")


@pytest.mark.parametrize(("raw", "expected"), [
    ('(vec 1 "two" (obj (k (vec true))))', [1, "two", {"k": [True]}]),
    ('(obj (a "x) (y") (b null) (c (obj)))', {"a": "x) (y", "b": None, "c": {}}),
    ('(obj (a "say \\"hi\\""))', {"a": 'say "hi"'}),
    ("(vec)", []),
    ("(obj (a 1)", None),  # cut off
    ("(obj a 1)", None),  # a member without its own brackets
    ("(vec 1) (vec 2)", None),  # text after the value
    ("plain text", None),
])
def test_s_expressions_read_back_as_json_or_not_at_all(raw: str, expected: object) -> None:
    """Objects and arrays with openings of their own (`(obj`, `(vec`) and members closed each
    (`(KEY VALUE)`): JSON leaves, brackets inside strings are text."""
    found = nested_to_json(raw, SEXPR)
    assert (json.loads(found) if found is not None else None) == expected


def test_a_nested_syntaxs_own_brackets_are_serialized_only_when_set() -> None:
    """The brackets and member end of an s-expression syntax survive the analysis' JSON form; a
    syntax with braces and square brackets writes neither key."""
    sexpr, edn = analyze_family("sexpr_calls.jinja"), analyze_family("edn_calls.jinja")
    data = sexpr.to_dict()["tools"]
    assert (data["arg_nested_brackets"], data["arg_nested_member_end"]) == (["(obj", ")", "(vec", ")"], ")")
    assert autoparser.Analysis.from_dict(json.loads(sexpr.to_json()), source=sexpr.source) == sexpr
    assert "arg_nested_brackets" not in edn.to_dict()["tools"]


@pytest.mark.parametrize(("raw", "expected"), [
    ("\n    a: x y\n    b:\n      - 1\n      -\n        c: true\n    d: null", {"a": "x y", "b": [1, {"c": True}], "d": None}),
    ("\n    - one\n    - 2", ["one", 2]),
    ("Oslo", None),  # a value on the argument's own line
    ("\n    - one\n    b: 2", None),  # elements and members mixed
    ("\n    a: 1\n      b: 2", None),  # a deeper line with no member before it
])
def test_an_indented_block_reads_back_as_json_or_not_at_all(raw: str, expected: object) -> None:
    found = nested_to_json(raw, ("indented", ":", "-"))
    assert (json.loads(found) if found is not None else None) == expected


@pytest.mark.parametrize(("raw", "expected"), [
    ("\n    a: 1\n    b:\n      - 2", {"a": 1, "b": [2]}),
    ("\n  a: 1", None),  # at the argument's own indentation: the next argument
    ("\n    a: 1\ncall: x", None),  # a line indented less: the next call's header
    ("\ncall: x", None),
])
def test_an_indented_block_lies_deeper_than_its_argument(raw: str, expected: object) -> None:
    found = nested_to_json(raw, ("indented", ":", "-", "  "))
    assert (json.loads(found) if found is not None else None) == expected


@pytest.mark.parametrize(("raw", "expected"), [
    ('\n    a: "x: y"\n    b:\n      - "one"\n      - 2', {"a": "x: y", "b": ["one", 2]}),
    ('\n    a: "say \\"hi\\""', {"a": 'say "hi"'}),
    ("\n    a: bare", {"a": "bare"}),  # not JSON: kept as written
])
def test_an_indented_block_of_json_values_reads_its_strings_unquoted(raw: str, expected: object) -> None:
    """Where the template writes every value as JSON, a block's strings are JSON strings."""
    found = nested_to_json(raw, ("indented", ":", "-", "  ", '"'))
    assert (json.loads(found) if found is not None else None) == expected


def test_a_yaml_like_call_list_reads_nested_blocks_of_json_values() -> None:
    """`- name: NAME` and an indented `arguments:` block whose values are JSON, objects and arrays
    as deeper blocks: whole == streamed one character at a time."""
    analysis = analyze_family("yaml_list_calls.jinja")
    tools = [{"type": "function", "function": {"name": "plan", "parameters": {"type": "object", "properties": {
        "route": {"type": "object"}, "days": {"type": "integer"}, "note": {"type": "string"}}}}}]
    output = ('tool_calls:\n- name: plan\n  arguments:\n    route:\n      from: "Oslo"\n      stops:\n'
              '        - "Voss"\n    days: 2\n- name: plan\n  arguments:\n    note: "a: b"')
    parser = analysis.parser(tools=tools)
    whole = parser.parse(output)
    assert [json.loads(c["function"]["arguments"]) for c in whole["tool_calls"]] == [
        {"route": {"from": "Oslo", "stops": ["Voss"]}, "days": 2}, {"note": "a: b"}]
    stream = parser.stream()
    for char in output:
        stream.feed(char)
    stream.finish()
    assert without_generated_ids(stream.message()) == without_generated_ids(whole)


YAML_HEAD = "tool_calls:\n- name: get_weather\n  arguments:"
YAML_UNTYPED = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "options": {}, "places": {}}}}}]
YAML_TYPED = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "options": {"type": "object"}, "places": {"type": "array"}}}}}]
YAML_CITY_ONLY = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                                                                                          "properties": {
                                                                                              "city": {"type": "string"}}}}}]


def _whole_nothing_lost(analysis: autoparser.Analysis, tools: list, output: str) -> dict:
    """The whole parse, checked against streams one character at a time and split at every
    place; no letter or digit of the output is lost."""
    parser = analysis.parser(tools=tools)
    whole = analyses.whole_checked_by_streams(parser, output)
    assert not lost_letters(analysis, output, whole), lost_letters(analysis, output, whole)
    return whole


@pytest.mark.parametrize("tools", [YAML_UNTYPED, YAML_TYPED, YAML_CITY_ONLY], ids=["untyped", "typed", "unnamed"])
def test_a_yaml_like_value_written_as_nothing_takes_in_no_later_line(tools: list) -> None:
    """`    places:` with nothing after it: the value ends at the line break before the next key
    (`options:` is the next key, not `places`' value), whether the schema types it, leaves it
    untyped or does not name it; the next call is whole."""
    analysis = analyze_family("yaml_list_calls.jinja")
    output = f'{YAML_HEAD}\n    places:\n    options:\n    city: "Paris"\n- name: get_weather\n  arguments:\n    places:'
    whole = _whole_nothing_lost(analysis, tools, output)
    empty = {"places": "", "options": ""} if tools is not YAML_TYPED else {"places": [], "options": {}}
    assert [json.loads(c["function"]["arguments"]) for c in whole["tool_calls"]] == [
        {**empty, "city": "Paris"}, {"places": empty["places"]}]
    assert whole["content"] is None


@pytest.mark.parametrize("tools", [YAML_UNTYPED, YAML_TYPED, YAML_CITY_ONLY], ids=["untyped", "typed", "unnamed"])
@pytest.mark.parametrize("block", ['\n      a: 1\n      b:\n        - "x"', '\n      a:\n        b: true'])
def test_a_yaml_like_block_for_the_last_argument_ends_where_the_next_call_begins(tools: list, block: str) -> None:
    """An object written as a block for the call's last argument: the line that begins a call
    (`- name:`, at the list's indentation) ends the block and the call; the next call is read
    whole, not taken in as the block's text."""
    analysis = analyze_family("yaml_list_calls.jinja")
    output = f'{YAML_HEAD}\n    city: "Paris"\n    options:{block}\n- name: get_weather\n  arguments:\n    city: "Oslo"'
    whole = _whole_nothing_lost(analysis, tools, output)
    options = {"a": 1, "b": ["x"]} if "- " in block else {"a": {"b": True}}
    assert [json.loads(c["function"]["arguments"]) for c in whole["tool_calls"]] == [
        {"city": "Paris", "options": options}, {"city": "Oslo"}]
    assert whole["content"] is None and not any(c.get("incomplete") for c in whole["tool_calls"])


@pytest.mark.parametrize(("written", "city"), [
    ('"Oslo"]', '"Oslo"]'),  # a stray bracket: no literal, the text as written
    ("", None),  # nothing: a string is written quoted
    ('"Oslo', '"Oslo'),  # its quote left open
])
def test_a_broken_yaml_like_value_leaves_the_later_calls_whole(written: str, city: str | None) -> None:
    """A value broken on its own line (a stray bracket, nothing, a quote left open) ends at the
    line that begins the next call: the later calls are read whole, nothing is lost."""
    analysis = analyze_family("yaml_list_calls.jinja")
    later = '\n- name: get_weather\n  arguments:\n    city: "Paris"\n- name: search\n  arguments:\n    query: "Rome"'
    output = f"{YAML_HEAD}\n    city: {written}{later}"
    whole = _whole_nothing_lost(analysis, analyses.WEATHER_TOOLS, output)
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole["tool_calls"]]
    assert calls[-2:] == [("get_weather", {"city": "Paris"}), ("search", {"query": "Rome"})]
    assert not any(c.get("incomplete") for c in whole["tool_calls"][-2:])
    if city is not None:
        assert calls[0] == ("get_weather", {"city": city})


YAML_TWO_CALLS = (f'{YAML_HEAD}\n    city: "Paris"\n    days: 3\n- name: search\n  arguments:\n    query: "Rome"')
YAML_TWO_CALLS_READ = [("get_weather", {"city": "Paris", "days": 3}), ("search", {"query": "Rome"})]


def test_a_yaml_like_call_list_cut_off_anywhere_keeps_its_complete_values() -> None:
    """Two calls cut off at every place: a call cut inside a quoted string is marked incomplete
    and its value is what was written of it, quotes not in it; every call before the last is
    whole and complete, the last holds what was written of its values; one character at a time
    reads as the whole does; nothing is lost."""
    analysis = analyze_family("yaml_list_calls.jinja")
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS)

    def parse(written: str) -> dict:
        whole = without_generated_ids(parser.parse(written))
        assert _streamed(parser, list(written)) == whole, written
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]), bool(c.get("incomplete")))
                 for c in whole["tool_calls"] or []]
        for i, ((name, args, _), (expected_name, expected)) in enumerate(zip(calls, YAML_TWO_CALLS_READ,
                                                                              strict=False)):
            assert name == expected_name, written
            assert args == expected if i < len(calls) - 1 else all(
                expected[k].startswith(v) if isinstance(v, str) else v == expected[k] for k, v in args.items()), written
        assert not any(incomplete for *_, incomplete in calls[:-1]), written
        if (open_string := re.search(r'(\w+): "([^"\n]*)\Z', written)) is not None:
            assert calls[-1][1:] == ({**calls[-1][1], open_string[1]: open_string[2]}, True), written
        return whole

    losses = losses_at_every_cut(YAML_TWO_CALLS, parse, marker_patterns(analysis))
    assert not losses, losses[0]
    assert [c[:2] for c in [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                            for c in parse(YAML_TWO_CALLS)["tool_calls"]]] == YAML_TWO_CALLS_READ


KEY_LINES = {  # two calls, arguments one a line; the keys' indentation
    "yaml_list_calls.jinja": (f'{YAML_HEAD}\n    city: "Paris"\n    days: 3\n- name: search\n  arguments:\n'
                              '    query: "Rome"\n    days: 2', "\n    "),
    "indented_block.jinja": ("Sure.\ncall: get_weather\n  city: Paris\n  days: 3\ncall: search\n  query: Rome\n"
                             "  days: 2", "\n  "),
}


@pytest.mark.parametrize("tools", [analyses.WEATHER_TOOLS, None], ids=["named", "unnamed"])
@pytest.mark.parametrize("name", sorted(KEY_LINES))
def test_a_call_cut_off_in_a_key_line_is_incomplete(name: str, tools: list | None) -> None:
    """Arguments one a line: the output cut after a key line's indentation, or inside its key
    before the colon, in any argument of either call (its first too, the call's header whole,
    `arguments:⏎    que`): the call was cut off there. It keeps its complete values and is
    incomplete, what was written of the key is content, the calls before it are whole, as a
    JSON call cut in a key is (`{"que`). A call's header alone (`arguments:`, or the line break
    after it or after a value, which may begin the next call) is a whole call, as the template
    writes a call with no arguments. Whole as one character at a time and split at every place,
    nothing lost."""
    analysis = analyze_family(name)
    text, indent = KEY_LINES[name]
    in_key = re.compile(re.escape(indent) + r"(\w*)\Z")
    cuts = [cut for cut in range(len(text) + 1) if in_key.search(text[:cut])]
    assert len(cuts) > 12
    for cut in cuts:
        written = text[:cut]
        whole = _whole_nothing_lost(analysis, tools, written)
        *before, last = whole["tool_calls"]
        assert last.get("incomplete") and not any(c.get("incomplete") for c in before), written
        assert (last["function"]["name"], len(before)) == (("get_weather", 0) if "search" not in written else
                                                           ("search", 1)), written
        key = in_key.search(written)[1]
        assert (whole["content"] or "").endswith(key) and "name" not in (whole["content"] or ""), written
    header = text[:text.index(indent, text.index("search"))]  # the second call's header alone
    for written in (header, header + "\n"):
        whole = _whole_nothing_lost(analysis, tools, written)
        assert not any(c.get("incomplete") for c in whole["tool_calls"]) and len(whole["tool_calls"]) == 2


@pytest.mark.parametrize("names", [("get_weather", "search"), ("add", "a_b")])
def test_with_no_tools_a_name_may_hold_the_first_letter_of_the_marker_after_it(names: tuple[str, str]) -> None:
    """No tools given: a name ends where the whitespace before the marker after it begins
    (`\n  arguments:`), so the marker's first letter (`a`) may be the name's own; whole, one
    character at a time, split at every place, nothing lost."""
    analysis = analyze_family("yaml_list_calls.jinja")
    first, second = names
    output = (f'tool_calls:\n- name: {first}\n  arguments:\n    city: "Paris"\n'
              f'- name: {second}\n  arguments:\n    query: "Rome"')
    whole = _whole_nothing_lost(analysis, None, output)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole["tool_calls"]] == [
        (first, {"city": "Paris"}), (second, {"query": "Rome"})]
    assert whole["content"] is None


@pytest.mark.parametrize("space", [" ", "", "  "])
def test_with_no_tools_a_name_after_a_marker_whose_space_the_analysis_left_out_is_read(space: str) -> None:
    """No tools given, upper-case word markers (`CALL_OPEN get_weather ARGS_FOLLOW {...}`): the
    space between the section's opener and the name is no part of the name, as it is none of a
    tool's name written as it is; the calls are read as with tools given; whole, one character
    at a time, split at every place, nothing lost."""
    analysis = analyze_family("caps_words.jinja")
    output = (f'Sure.\nCALL_OPEN{space}get_weather ARGS_FOLLOW {{"city": "Paris"}} CALL_CLOSE'
              f'CALL_OPEN{space}search ARGS_FOLLOW {{"query": "Rome"}} CALL_CLOSE')
    for tools in (None, analyses.WEATHER_TOOLS):
        whole = _whole_nothing_lost(analysis, tools, output)
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole["tool_calls"]] == [
            ("get_weather", {"city": "Paris"}), ("search", {"query": "Rome"})]
        assert whole["content"] == "Sure."


def test_each_argument_line_ends_its_value_where_the_next_key_or_call_begins() -> None:
    """Arguments one a line (`  key: value`): a value ends at the line break before the next
    key or call, not at a line inside it indented deeper; the end of output ends the last value,
    which leaves its call whole."""
    analysis = analyze_family("indented_block.jinja")
    assert (analysis.tools.arg_start, analysis.tools.arg_key_end, analysis.tools.arg_end) == ("\n  ", ": ", "")
    text = "Sure.\ncall: get_weather\n  location: Paris, France\n  days: 3\ncall: search_docs\n  query: a: b"
    for tools in (TOOLS, None):
        parser = analysis.parser(tools=tools)
        message = parser.parse(text)
        assert message["content"] == "Sure."
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
            ("get_weather", {"location": "Paris, France", "days": 3}), ("search_docs", {"query": "a: b"})]
        assert not any(c.get("incomplete") for c in message["tool_calls"])
        assert _streamed(parser, list(text)) == without_generated_ids(message)


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
def test_the_next_calls_header_is_no_argument_of_the_call_before(tools) -> None:
    """Arguments one a line, indented (`  days: 3`): a line indented less (`call: sea`, the
    next call's header, cut off) is no argument of the call before, at any cut after its last
    value, before the header's colon too (`\ncall` is no part of the value `3`); whole as
    streamed one character at a time and split in two anywhere."""
    analysis = analyze_family("indented_block.jinja")
    parser = analysis.parser(tools=tools)
    first = "Sure.\ncall: get_weather\n  location: Paris, France\n  days: 3"
    text = first + "\ncall: search_docs\n  query: a: b"
    for cut in range(len(first), len(text) + 1):
        written = text[:cut]
        whole = without_generated_ids(parser.parse(written))
        call = whole["tool_calls"][0]
        assert json.loads(call["function"]["arguments"]) == {"location": "Paris, France", "days": 3}, written
        assert not call.get("incomplete"), written
        assert _streamed(parser, list(written)) == whole, written
        for split in range(len(written) + 1):
            assert _streamed(parser, [written[:split], written[split:]]) == whole, (written, split)


KEYS_LINE = "Sure.\ncall: get_weather\n  location: Paris, France\n  days: 3"


def _agrees_in_any_chunks(parser, written: str) -> dict:  # type: ignore[no-untyped-def]
    """The whole parse, checked against one character at a time, every split in two and random chunkings."""
    whole = without_generated_ids(parser.parse(written))
    assert _streamed(parser, list(written)) == whole, written
    for split in range(len(written) + 1):
        assert _streamed(parser, [written[:split], written[split:]]) == whole, (written, split)
    for seed in range(6):
        assert without_generated_ids(analyses.streamed_in_random_chunks(parser, written, seed)) == whole, \
            (written, seed)
    return whole


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
@pytest.mark.parametrize("line", ["\n  unit: celsius", "\n  location: Oslo", "\n  call: x"])
def test_a_line_at_the_keys_indentation_cut_before_its_colon_is_a_key_cut_off(line: str, tools) -> None:
    """Arguments one a line (`  days: 3`): a line at the keys' own indentation never goes on with
    the value before it (as in YAML, a value's next line lies deeper). Cut inside it before its
    colon, it is a key not yet complete: the value stays `3` (it was `"3\\n  unit"`), the call is
    incomplete and what was written of the key is content, as a JSON call cut in a key keeps it
    (`{"days": 3, "un`); whole as streamed in any chunks, and nothing written is lost (`unplaced`)."""
    analysis = analyze_family("indented_block.jinja")
    parser = analysis.parser(tools=tools)
    colon = len(KEYS_LINE) + line.index(":")
    for cut in range(len(KEYS_LINE) + len("\n  ") + 1, colon + 1):
        written = (KEYS_LINE + line)[:cut]
        whole = _agrees_in_any_chunks(parser, written)
        [call] = whole["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"location": "Paris, France", "days": 3}, written
        assert call.get("incomplete") and whole["content"].endswith(written[len(KEYS_LINE):]), (written, whole)

    def parse(written: str) -> dict:
        return _agrees_in_any_chunks(parser, written)

    losses = losses_at_every_cut(KEYS_LINE + line, parse, marker_patterns(analysis))
    assert not losses, losses[0]


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
@pytest.mark.parametrize("rest", ["\n  oops", "\n  oops\n  unit: celsius", "\n  two words\ncall: search_docs"])
def test_a_line_at_the_keys_indentation_with_no_colon_breaks_the_call(rest: str, tools) -> None:
    """A complete output where a line at the keys' indentation has no colon: the line is not the
    value's text (`3`, not `"3\\n  oops"`); the call breaks there, keeps its complete values and
    is incomplete, and the text from that line on is content, as where any call breaks; whole
    as streamed in any chunks."""
    parser = analyze_family("indented_block.jinja").parser(tools=tools)
    whole = _agrees_in_any_chunks(parser, KEYS_LINE + rest)
    call = whole["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"location": "Paris, France", "days": 3}, whole
    assert call.get("incomplete") and rest.split("\n")[1] in whole["content"], whole


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
def test_a_value_goes_on_on_a_line_indented_less_that_is_no_header(tools) -> None:
    """A string's next line written at no indentation (`Paris\\nsecond line`) is no key and no
    call's header: it is the value's text, as the template renders a string holding a line break."""
    parser = analyze_family("indented_block.jinja").parser(tools=tools)
    whole = _agrees_in_any_chunks(parser, "Sure.\ncall: get_weather\n  location: Paris\nsecond line\n  days: 3")
    [call] = whole["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"location": "Paris\nsecond line", "days": 3}
    assert not call.get("incomplete") and whole["content"] == "Sure.", whole


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
@pytest.mark.parametrize("text", ["\ncall: get_weather\n  days:\ncall: ",
                                  "\ncall: get_weather\n  days:\ncall: search_docs\n  query: x",
                                  "\ncall: get_weather\n  days:\n  - 1\ncall: search_docs"])
def test_a_line_no_deeper_than_the_argument_is_no_block_of_its_value(text: str, tools) -> None:
    """An argument with no value on its line (`days:`) holds only the lines indented deeper
    than it: the next call's header (`call: `, at no indentation) or a line at the argument's
    own indentation is no nested block of it (`{"call": ""}`, `[1]`); streamed as whole."""
    parser = analyze_family("indented_block.jinja").parser(tools=tools)
    whole = without_generated_ids(parser.parse(text))
    for call in whole["tool_calls"]:
        arguments = json.loads(call["function"]["arguments"])
        assert "call" not in arguments and not isinstance(arguments.get("days"), (dict, list)), whole
    assert _streamed(parser, list(text)) == whole
    for split in range(len(text) + 1):
        assert _streamed(parser, [text[:split], text[split:]]) == whole, split


UNNAMED = {"location": "Paris", "unit": "celsius", "hours": 6, "days": 3}  # `unit`, `hours`: no schema names them


@pytest.mark.parametrize("name", ["indented_block.jinja", "xml_parameters.jinja", "key_value_tags.jinja",
                                  "typed_params.jinja"])
def test_an_argument_the_schema_does_not_name_keeps_its_call(name: str) -> None:
    """With tools given, a tagged argument whose key the tool's schema does not name (`unit:`,
    `<parameter=unit>`) is read as JSON arguments are, whatever the policy: the call keeps it,
    its value read as the format reads a value of no schema (as where no tools are given),
    streamed in any chunks as whole. The strict policy still keeps calls after content as content."""
    analysis = analyze_family(name)
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": UNNAMED}}]}
    history = [{"role": "user", "content": "Weather?"}]
    prompt = analysis.render(history, tools=TOOLS, add_generation_prompt=True)
    output = analysis.render(history + [message], tools=TOOLS, add_generation_prompt=False)[len(prompt):]
    untyped = without_generated_ids(analysis.parser().parse(output))
    for which in ("lenient", "strict"):
        parser = analysis.parser(tools=TOOLS, tool_call_policy=which)
        whole = without_generated_ids(parser.parse(output))
        assert [json.loads(c["function"]["arguments"]) for c in whole["tool_calls"]] == [UNNAMED], which
        assert not (whole["content"] or "").strip() and not any(c.get("incomplete") for c in whole["tool_calls"])
        assert whole == untyped
        for size in (1, 3, 7):
            chunks = [output[i:i + size] for i in range(0, len(output), size)]
            assert _streamed(parser, chunks) == whole, f"{which}, {size}-character chunks"
    after_text = analysis.parser(tools=TOOLS, tool_call_policy="strict").parse("Sure." + output)
    assert after_text["tool_calls"] == [] and "unit" in after_text["content"]


# -- the assistant header's last marker written again -------------------------------------------------

@pytest.mark.parametrize(("name", "again"), [("content_wrapped.jinja", "<|CHATBOT_TOKEN|>"),
                                             ("bare_json.jinja", "<|end_header_id|>"),
                                             ("instructed_wrappers.jinja", "[ASSISTANT]")])
def test_the_headers_last_marker_written_again_first_is_markup(name: str, again: str) -> None:
    """A model that writes the prompt's last marker again at the very start of its output
    (`<|CHATBOT_TOKEN|>Hello`): the marker is dropped, streamed or whole; anywhere later, and
    where the output continues a message the prompt began, it is text."""
    analysis = analyze_family(name)
    header = analysis.generation_prompt
    parser = analysis.parser()
    for text in (again + "Hello, world!", "\n" + again + "Hello, world!"):
        message = parser.parse(text)
        assert message["content"] == "Hello, world!"
        assert _streamed(parser, list(text)) == without_generated_ids(message)
    assert again in parser.parse("Hello " + again)["content"]
    continued = analysis.parser(prompt=header + "Hello")
    assert continued.parse(again + " world")["content"].startswith(again)


def test_a_plain_text_header_written_again_stays_text() -> None:
    """Only a marker written like a token is dropped: a header of words (`### Assistant:`) that
    the output repeats is the model's text."""
    analysis = analyze_family("plain_chat.jinja")
    assert analysis.parser().parse("### Assistant:\nHello")["content"] == "### Assistant:\nHello"


def test_a_call_element_self_closed_has_no_arguments() -> None:
    """Calls as `<invoke name="f">` elements: a call with no arguments may come self-closed
    (`<invoke name="f"/>`), read as the call with empty arguments, streamed as whole."""
    analysis = analyze_family("invoke_parameters.jinja")
    text = ('Ok.\n<calls>\n<invoke name="search"/>\n<invoke name="get_weather">\n'
            '<parameter name="city">Oslo</parameter>\n</invoke>\n</calls>')
    message = analyses.parse(analysis, text)
    assert message["content"] == "Ok."
    assert analyses.calls(message) == [("search", {}), ("get_weather", {"city": "Oslo"})]
