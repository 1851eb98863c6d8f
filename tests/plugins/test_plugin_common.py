"""The engine-neutral parts of the plugins: they run without vLLM or SGLang installed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from analyses import gpt_oss
from hypothesis import example, given
from hypothesis import strategies as st

import autoparser
from autoparser.language.build import ReasoningCut, Request, reasoning_cut
from autoparser.language.request import CLOSED, FREE, IMPLIED, OPEN
from autoparser.language.token_ids import ReasoningIds
from autoparser.plugins.common import CallIds, ReasoningSplit, merge_deltas, template_key

START, END, OPENER = "<think>", "</think>", "<tool_call>"


def split_all(text: str, cuts: list[int], state: str, implied: bool = False,
              stream_reasoning: bool = True) -> tuple[str, str]:
    cut = ReasoningCut(state, START, END, (OPENER,), implied, (OPENER,) if implied else ())
    return split_by(cut, text, cuts, stream_reasoning)


def split_by(cut: ReasoningCut, text: str, cuts: list[int], stream_reasoning: bool = True) -> tuple[str, str]:
    split = ReasoningSplit(cut, stream_reasoning)
    reasoning, rest = [], []
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    for a, b in zip(points, points[1:], strict=False):
        r, t = split.feed(text[a:b])
        reasoning.append(r)
        rest.append(t)
    r, t = split.finish()
    return "".join(reasoning + [r]), "".join(rest + [t])


def test_reasoning_ends_at_the_end_marker_and_loses_its_surrounding_whitespace() -> None:
    assert split_all("\n thinking hard \n</think>answer", [], OPEN) == ("thinking hard", "answer")


def test_the_output_may_open_reasoning_itself() -> None:
    assert split_all("  <think>hm</think> ok", [], FREE) == ("hm", " ok")
    assert split_all("no reasoning here", [], FREE) == ("", "no reasoning here")
    assert split_all("<thin", [], FREE) == ("", "<thin")


def test_an_end_marker_alone_first_is_an_empty_reasoning_block() -> None:
    assert split_all(" </think>answer", [], FREE) == ("", "answer")


def test_implied_reasoning_ends_at_its_end_marker_unless_a_call_comes_first() -> None:
    assert split_all("hm</think>answer", [2, 5], IMPLIED, implied=True) == ("hm", "answer")
    assert split_all("hm<tool_call>{}</think>", [2, 5], IMPLIED, implied=True) == ("", "hm<tool_call>{}</think>")
    assert split_all("just an answer", [3], IMPLIED, implied=True) == ("", "just an answer")
    for text in ("hm</think>answer", "hm<tool_call>{}</think>"):  # character by character
        assert split_all(text, list(range(len(text))), IMPLIED, implied=True) == split_all(
            text, [], IMPLIED, implied=True)


def test_a_start_marker_repeated_after_a_prompt_that_opened_reasoning_is_dropped() -> None:
    assert split_all("<think>hm</think>ok", [], OPEN) == ("hm", "ok")


def test_a_tool_call_ends_reasoning_and_stays_in_the_rest() -> None:
    assert split_all("plan<tool_call>{}", [], OPEN) == ("plan", "<tool_call>{}")


def test_unterminated_reasoning_stays_reasoning() -> None:
    assert split_all("still thinking </thi", [], OPEN) == ("still thinking </thi", "")


def test_a_closed_start_reads_no_reasoning() -> None:
    assert split_all("<think>hm</think>ok", [3], CLOSED) == ("", "<think>hm</think>ok")


def test_held_reasoning_comes_out_whole_once_it_is_over() -> None:
    split = ReasoningSplit(ReasoningCut(OPEN, START, END, (OPENER,)), stream_reasoning=False)
    assert split.feed("one ") == ("", "")
    assert split.feed("two</think>ok") == ("one two", "ok")


pieces = st.lists(st.sampled_from(["a", " ", "\n", "<", "/", START, END, OPENER, "<thi", "nk>", "x y"]), max_size=12)


@given(pieces, st.lists(st.integers(min_value=0, max_value=200), max_size=8),
       st.sampled_from([OPEN, FREE, IMPLIED, CLOSED]), st.booleans())
def test_any_chunking_gives_the_whole_split(parts: list[str], cuts: list[int], state: str, held: bool) -> None:
    text = "".join(parts)
    implied = state == IMPLIED
    assert split_all(text, cuts, state, implied, not held) == split_all(text, [], state, implied)


def test_merged_deltas_keep_the_first_fragment_of_each_call() -> None:
    deltas = [{"reasoning_content": "r"}, {"content": "c"},
              {"tool_calls": [{"index": 0, "id": "x", "type": "function", "function": {"name": "f", "arguments": ""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}]
    assert merge_deltas(deltas) == ("r", "c", [{"index": 0, "id": "x", "name": "f", "arguments": "{\"a\": 1}"}])


def test_made_up_ids_are_replaced_and_written_ones_pass_through() -> None:
    first, second = CallIds(), CallIds()
    assert first.unique("call_1", "text") != second.unique("call_1", "text")
    ids = CallIds()
    ids.saw("<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>")
    assert ids.unique("functions.get_weather:0") == "functions.get_weather:0"


def test_template_key_depends_on_the_special_tokens() -> None:
    assert template_key("t", "<s>", "</s>") != template_key("t", "", "</s>")


# A vocabulary where each marker is one special token and every other character one token, as
# DeepSeek's markers are: the cut in ids must then be the cut in text, exactly.
MARKER_IDS = {START: 1_000_001, END: 1_000_002, OPENER: 1_000_003}


def marker_encoder(marker_ids: dict[str, int]) -> Callable[[str], list[int]]:
    """Text to ids: each of these markers one id (the first listed where two begin alike), every
    other character its code point."""
    def encode(text: str) -> list[int]:
        ids, at = [], 0
        while at < len(text):
            marker = next((m for m in marker_ids if text.startswith(m, at)), None)
            ids.append(marker_ids[marker] if marker else ord(text[at]))
            at += len(marker) if marker else 1
        return ids

    return encode


encode = marker_encoder(MARKER_IDS)


def decode(ids: list[int]) -> str:
    names = {v: k for k, v in MARKER_IDS.items()}
    return "".join(names.get(i) or chr(i) for i in ids)


@given(pieces, st.sampled_from([OPEN, FREE, IMPLIED, CLOSED]))
def test_the_cut_in_token_ids_is_the_cut_in_text(parts: list[str], state: str) -> None:
    """`ReasoningIds` (the parsers' token-id helpers, which the vLLM plugin uses) against
    `ReasoningSplit` (the plugins' text cut): the answer's ids are the answer's text, and the
    reasoning's ids its text, up to the whitespace the text cut trims."""
    implied = state == IMPLIED
    cut = ReasoningCut(state, START, END, (OPENER,), implied, (OPENER,) if implied else ())
    text = "".join(parts)
    reasoning, rest = split_all(text, [], state, implied)
    ids = ReasoningIds(cut, encode)
    output = encode(text)
    if ids.is_reasoning_end(output):
        assert decode(ids.extract_content_ids(output)).strip() == rest.strip()
    else:
        assert not rest.strip()
        assert ids.extract_content_ids(output) == []
    span = ids.reasoning_span(output)
    assert decode(output[span[0]:span[1]] if span else []).strip() == reasoning
    assert ids.reasoning_token_count(output) == (span[1] - span[0] if span else 0)


def test_variables_beyond_the_conversation_are_named_for_the_client() -> None:
    import json
    from pathlib import Path

    import autoparser
    from autoparser.plugins.common import template_inputs_note

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
    catalog = autoparser.analyze((fixtures / "catalog_inputs.jinja").read_text(encoding="utf-8"), "<s>", "</s>")
    note = template_inputs_note(catalog)
    assert note is not None and "chat_template_kwargs" in note
    assert "'tool_catalog' (the request's tool definitions as JSON text)" in note
    assert "'session_label' (any text" in note
    plain = autoparser.analyze((fixtures / "plain_chat.jinja").read_text(encoding="utf-8"), "<s>", "</s>")
    assert template_inputs_note(plain) is None
    # what the note asks for renders the prompt the analysis used
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    kwargs = catalog.input_kwargs(tools)
    assert kwargs == {"tool_catalog": json.dumps(tools, ensure_ascii=False, indent=2), "session_label": ""}


def test_the_plugin_says_so_once_when_the_model_is_served(caplog) -> None:  # type: ignore[no-untyped-def]
    import logging
    from pathlib import Path
    from types import SimpleNamespace

    from autoparser.plugins.common import served_model

    source = (Path(__file__).resolve().parents[2] / "fixtures" / "templates" / "catalog_inputs.jinja").read_text(
        encoding="utf-8")
    tokenizer = SimpleNamespace(chat_template=source + "{# served once #}", bos_token="<s>", eos_token="</s>")
    with caplog.at_level(logging.WARNING, logger="autoparser.plugins"):
        served_model(tokenizer)
        served_model(tokenizer)
    assert [r.getMessage().count("tool_catalog") for r in caplog.records] == [1]


def test_the_tool_stage_reads_a_fenced_json_answer_where_the_request_asks_for_json() -> None:
    from analyses import qwen3

    from autoparser.plugins.common import ServedModel

    model = ServedModel("test", qwen3())
    fenced = '```json\n{"a": 1}\n```'
    asked = model.answer_parser(None, "auto", True, {"type": "json_object"})
    assert asked.parse(fenced)["content"] == '{"a": 1}'
    assert model.answer_parser(None, "auto", True).parse(fenced)["content"] == fenced
    assert asked is model.answer_parser(None, "auto", True, {"type": "json_object"})  # built once


# -- a start marker whose tag opens reasoning alone (its word left out) -----------------------------

TAG, WORDED, CLOSE = "<|chan>", "<|chan>thought", "<chan|>"
CHANNEL_IDS = {WORDED: None, TAG: 2_000_001, CLOSE: 2_000_002, OPENER: 1_000_003}


def channel_cut(state: str) -> ReasoningCut:
    return ReasoningCut(state, WORDED, CLOSE, (OPENER,), start_alone=TAG)


def test_the_start_markers_tag_alone_opens_reasoning() -> None:
    for state in (FREE, OPEN):
        for text in ("<|chan>thought\nhm<chan|>ok", "<|chan>hm<chan|>ok", " <|chan>\nhm<chan|>ok"):
            assert split_by(channel_cut(state), text, []) == ("hm", "ok"), (state, text)
        assert split_by(channel_cut(state), "<|chan>thousand<chan|>ok", []) == ("thousand", "ok")
    assert split_by(channel_cut(FREE), "no reasoning", []) == ("", "no reasoning")
    assert split_by(ReasoningCut(FREE, WORDED, CLOSE, (OPENER,)), "<|chan>hm<chan|>ok", []) == (
        "", "<|chan>hm<chan|>ok")  # without `start_alone`, the tag alone opens nothing


@pytest.mark.parametrize("state", [FREE, OPEN])
@pytest.mark.parametrize("text, expected", [
    ("<|chan>thoughtful<chan|>ok", ("thoughtful", "ok")),  # a longer word: the tag alone opened
    ("<|chan>thought_1<chan|>ok", ("thought_1", "ok")),
    ("<|chan>thought<chan|>ok", ("", "ok")),
    ("<|chan>thought: hm<chan|>ok", (": hm", "ok")),
    ("<|chan>thought", ("", "")),  # the output ends on the whole marker
])
def test_a_bounded_start_marker_is_not_read_before_a_word_character(state: str, text: str, expected: tuple) -> None:
    cut = ReasoningCut(state, WORDED, CLOSE, (OPENER,), start_alone=TAG, start_bounded=True)
    for size in (1, 2, 3, len(text)):
        assert split_by(cut, text, list(range(size, len(text), size))) == expected, size


channel_pieces = st.lists(st.sampled_from(["a", " ", "\n", "<|ch", "an>", "thou", "ght", TAG, WORDED, CLOSE, OPENER]),
                          max_size=12)


def channel_encode(text: str) -> list[int]:
    """The tag and the end marker one special token each; the word is written as text."""
    ids, at = [], 0
    while at < len(text):
        marker = next((m for m in (TAG, CLOSE, OPENER) if text.startswith(m, at)), None)
        ids.append(CHANNEL_IDS[marker] if marker else ord(text[at]))
        at += len(marker) if marker else 1
    return ids


def channel_decode(ids: list[int]) -> str:
    names = {v: k for k, v in CHANNEL_IDS.items() if v}
    return "".join(names.get(i) or chr(i) for i in ids)


@given(channel_pieces, st.lists(st.integers(min_value=0, max_value=200), max_size=8), st.sampled_from([OPEN, FREE]),
       st.booleans())
@example([" ", WORDED, "a", CLOSE, "a"], [], FREE, True)
@example([WORDED, "a", " ", OPENER], [], OPEN, True)
def test_the_tag_alone_splits_alike_in_any_chunking_and_in_ids(parts: list[str], cuts: list[int], state: str,
                                                               bounded: bool) -> None:
    """Bounded, the start marker's word is no word of it where a word character follows, in
    text and in ids alike (the ids decoded to find that character)."""
    text = "".join(parts)
    cut = replace(channel_cut(state), start_bounded=bounded)
    reasoning, rest = split_by(cut, text, [])
    assert split_by(cut, text, cuts) == (reasoning, rest)
    ids = ReasoningIds(cut, channel_encode, channel_decode)
    output = channel_encode(text)
    if ids.is_reasoning_end(output):
        assert channel_decode(ids.extract_content_ids(output)).strip() == rest.strip()
    else:
        assert not rest.strip()
    span = ids.reasoning_span(output)
    assert channel_decode(output[span[0]:span[1]] if span else []).strip() == reasoning


def test_a_start_marker_that_is_one_token_opens_the_reasoning_whatever_follows() -> None:
    """Where the whole start marker is one token (its ids do not begin with its tag's), the tag
    cannot open the reasoning alone: the marker stands whole even before a word character, so an
    engine still counts the reasoning that follows."""
    whole = {WORDED: 2_000_000, TAG: 2_000_001, CLOSE: 2_000_002, OPENER: 1_000_003}
    names = {v: k for k, v in whole.items()}
    encode = marker_encoder(whole)
    ids = ReasoningIds(replace(channel_cut(FREE), start_bounded=True), encode,
                       lambda found: "".join(names.get(i) or chr(i) for i in found))
    output = encode(f"{WORDED}The user asks.{CLOSE}ok")
    assert ids.reasoning_token_count(output) == len("The user asks.")
    assert ids.extract_content_ids(output) == encode("ok")


def test_the_cut_takes_the_tag_alone_where_the_parser_does() -> None:
    """The reasoning stage of an engine cuts where the parser reads: the fixture template's
    `<|aside>mull` opens reasoning with its tag alone too; harmony's channels keep their words."""
    template = Path(__file__).resolve().parents[2] / "fixtures" / "templates" / "worded_channel.jinja"
    analysis = autoparser.analyze(template.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")
    prompt = analysis.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    cut = reasoning_cut(analysis, Request(prompt=prompt))
    assert cut.start_alone == "<|aside>"
    parser = analysis.parser(prompt=prompt)
    for text in ("<|aside>mull\nplan<aside|>Done.", "<|aside>plan<aside|>Done.", "<|aside>muddled<aside|>Done.",
                 "<|aside>mulled it<aside|>Done.", "<|aside>mull_it<aside|>Done.", "Done."):
        message = parser.parse(text)
        reasoning, rest = ReasoningSplit(cut).split(text)
        assert (reasoning or None, rest.strip()) == (message["reasoning_content"], message["content"])
    assert reasoning_cut(gpt_oss(), Request(thinking=True)).start_alone == ""
