"""Nothing is lost (CONTRACT section 4), as hypothesis properties over hostile outputs.

Every letter and digit the model wrote is a structural marker or appears in the reasoning, the
content, a tool call's name, id or arguments; a call whose text could not all be placed is not
returned as a clean call. Three kinds of output that used to lose text:

* JSON calls with members the call has no place for (`{"name": ..., "argumes": {...}}`, a second
  name): the object's text stays content, or the call is marked incomplete;
* outputs cut at any point (by `max_tokens`): only the one member being written when the output
  stopped may be left out of a call, and that call is marked incomplete;
* long keys in tagged formats (247 characters and more): the same message streamed as whole.

Every property also checks that any chunking streams to the whole parse.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

import analyses
import corpora
import pytest
from analyses import DS_BOS, DS_CALL, DS_EOS, DS_SECTION, DS_SEP, without_generated_ids
from corpora import llamacpp_templates
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_outputs import _agrees_whole_and_streamed
from test_runtime_properties import (
    FAMILIES,
    TOOLS,
    _analysis,
    _messages_equal_after_chunking,
    _parser,
    _strings_for,
    calls,
    plain_text,
)
from unplaced import (
    as_json_spelling,
    left_out,
    letters,
    losses_at_every_cut,
    lost_letters,
    marker_patterns,
    marker_texts,
    shown_twice,
)

import autoparser
from autoparser.language import commits, interpret
from autoparser.language.reading import Parser
from autoparser.render import TemplateRenderError
from autoparser.roundtrip import TOOLS as PROBE_TOOLS
from autoparser.roundtrip import probe_messages, run_case
from autoparser.tool_calls import ToolsAnalysis

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
SETTINGS = settings(max_examples=int(os.environ.get("AUTOPARSER_HYPOTHESIS_EXAMPLES", "40")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

JSON_FAMILIES = ["hermes", "qwen3", "mistral_array", "llama31", "bare_json_array"]
LONG_KEY_FAMILIES = ["qwen3_coder", "glm45", "keyed_tags"]
chunk_cuts = st.lists(st.integers(0, 10**6), max_size=12)


# -- JSON-call members ------------------------------------------------------------------------------

member_keys = st.sampled_from(["name", "arguments", "parameters", "argumes", "args", "params", "input",
                               "id", "type", "function", "extra"]) | \
    st.text(st.characters(whitelist_categories=("Ll",)), min_size=1, max_size=8)
member_values = st.sampled_from(['"get_weather"', '"search_web"', '"function"', '"call0abcd"']) | \
    st.dictionaries(st.sampled_from(["city", "days"]), st.sampled_from(["Paris", "Oslo", 3, 7]),
                    max_size=2).map(json.dumps)


def _known(tools, key: str) -> bool:
    return key in {tools.name_field, "arguments", "parameters", tools.args_field, "type", tools.id_field or "",
                   tools.function_field or ""}


@pytest.mark.parametrize("family", JSON_FAMILIES)
@SETTINGS
@given(members=st.lists(st.tuples(member_keys, member_values), min_size=1, max_size=4), cuts=chunk_cuts)
def test_json_call_members_are_never_dropped(family: str, members: list[tuple[str, str]], cuts) -> None:
    analysis = _analysis(family)
    tools = analysis.tools
    obj = "{" + ", ".join(f"{json.dumps(key)}: {value}" for key, value in
                          [(tools.name_field, '"get_weather"'), *members]) + "}"
    text = "Sure. " + tools.section_start + tools.call_start + obj + tools.call_end + tools.section_end
    message = _messages_equal_after_chunking(_parser(family), text, cuts)
    assert not lost_letters(analysis, text, message), (text, message)
    keys = [tools.name_field, *(key for key, _ in members)]
    strays = [k for k in keys if not _known(tools, k)]
    repeated = [k for k in set(keys) if k != "type" and keys.count(k) > 1]
    if strays or repeated:
        # the call had members with no place in it: their text is content, the call is not clean
        assert all(call.get("incomplete") for call in message["tool_calls"]), (text, message)


def test_misspelled_arguments_stay_content() -> None:
    """The issue's example: the call is not returned with `{}`, the model's text is kept."""
    analysis = analyses.hermes()
    text = '<tool_call>\n{"name": "get_weather", "argumes": {"city": "Paris"}}\n</tool_call>'
    message = analyses.parse(analysis, text)
    assert message["tool_calls"] == []
    assert message["content"] == text


def test_member_after_streamed_arguments_is_kept() -> None:
    analysis = analyses.hermes()
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}, "note": "soon"}\n</tool_call>'
    message = analyses.parse(analysis, text)
    [call] = message["tool_calls"]
    assert call["incomplete"] is True and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert '"note": "soon"}' in message["content"]


@pytest.mark.parametrize("cut", ["[TOOL_CALLS][", "[TOOL_CALLS] [", "Hi [TOOL_CALLS][", "[TOOL_CALLS][]",
                                 "[TOOL_CALLS] [1, 2]"])
def test_mistral_array_cut_after_its_bracket_keeps_it(cut: str) -> None:
    """A section that holds no call is content, its opener and bracket included."""
    message = analyses.parse(analyses.mistral_array(), cut)
    assert message["content"] == cut and message["tool_calls"] == []


# -- truncation points ------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
@SETTINGS
@given(data=st.data())
def test_truncated_output_loses_at_most_the_member_being_written(family: str, data) -> None:
    analysis = _analysis(family)
    written = data.draw(calls(_strings_for(analysis)))
    if not analysis.tools.parallel:
        written = written[:1]
    text = analyses.render_output(analysis, "some thought", "Some text.", written, stop=False)
    text = text[:data.draw(st.integers(0, len(text)))]
    message = _messages_equal_after_chunking(_parser(family, tools=True), text, data.draw(chunk_cuts))
    if not message["tool_calls"]:  # no call: every character but the markers is reasoning or content
        assert not left_out(text, message, marker_patterns(analysis)), (text, message)
    lost = lost_letters(analysis, _without_cut_marker(analysis, text), message)
    if not lost:
        return
    # only a member cut off mid-way is left out, and only from a call marked incomplete
    assert message["tool_calls"] and message["tool_calls"][-1].get("incomplete"), (text, message)
    members = [letters(as_json_spelling(f"{key} {value!r} {json.dumps(value, ensure_ascii=False)}"))
               for _name, args in written for key, value in args.items()]
    assert any(not lost - member for member in members), (text, message, lost)


def _without_cut_marker(analysis, text: str) -> str:
    """The text without a marker cut off at its end (`</ar` of `</arg_key>`): that is structure too.
    A whole marker at the end stays (it is blanked out as a marker), even where its last
    characters could also begin another marker."""
    if any(text.endswith(marker) for marker in marker_texts(analysis)):
        return text
    cut = max((size for marker in marker_texts(analysis) for size in range(1, len(marker))
               if text.endswith(marker[:size])), default=0)
    return text[:len(text) - cut]


# -- long keys --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", LONG_KEY_FAMILIES)
@SETTINGS
@given(key=st.text(st.characters(whitelist_categories=("Ll",)), min_size=200, max_size=400),
       value=plain_text, cuts=chunk_cuts)
def test_long_keys_stream_as_whole(family: str, key: str, value: str, cuts) -> None:
    analysis = _analysis(family)
    text = analyses.render_output(analysis, None, "", [("get_weather", {key: value})], stop=False)
    message = _messages_equal_after_chunking(_parser(family), text, cuts)
    assert not lost_letters(analysis, text, message), (text, message)
    if len(key) <= 256:  # a key up to the longest name the parser accepts is read as one
        [call] = message["tool_calls"]
        # the value reads as it would under a short key (an untyped `true` is JSON's true)
        short = analyses.render_output(analysis, None, "", [("get_weather", {"k": value})], stop=False)
        [short_call] = _parser(family).parse(short)["tool_calls"]
        expected = json.loads(short_call["function"]["arguments"])["k"]
        assert json.loads(call["function"]["arguments"]) == {key: expected}


@pytest.mark.parametrize("length", [246, 247, 256, 257, 300])
@pytest.mark.parametrize("family", LONG_KEY_FAMILIES)
def test_long_key_lengths_around_the_limit(family: str, length: int) -> None:
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, None, "", [("get_weather", {"k" * length: "Paris"})], stop=False)
    message = analyses.parse(analysis, text)  # also checks one character per chunk
    assert not lost_letters(analysis, text, message)


# -- long numbers -----------------------------------------------------------------------------------

NUMBER_FAMILIES = ["deepseek_r1", "deepseek_v31", "hermes", "llama31", "mistral_array", "qwen3_coder", "glm45",
                   "llama32_pythonic", "lfm2_python"]
# long integers, and long fractions, some past a double's range (`e999`: a JSON number all the same)
long_numbers = st.builds(lambda sign, head, digit, count, exponent: sign + head + str(digit) * count
                         + (exponent if head else ""),
                         st.sampled_from(["", "-"]), st.sampled_from(["", "0.", "3."]), st.integers(1, 9),
                         st.integers(500, 3000), st.sampled_from(["", "e-7", "E+2", "e999", "E-999"]))


@pytest.mark.parametrize("family", NUMBER_FAMILIES)
@SETTINGS
@given(number=long_numbers, cuts=chunk_cuts)
def test_long_numbers_are_kept_as_written(family: str, number: str, cuts) -> None:
    """A number of thousands of digits is the call's argument exactly as written, streamed in
    any chunks as whole (a 940-digit number was cut where a held token ends, 512 characters)."""
    analysis = _analysis(family)
    text = analyses.render_output(analysis, "Thinking.", "", [("get_weather", {"days": 7, "city": "Oslo"})],
                                  stop=False).replace("7", number, 1)
    message = _messages_equal_after_chunking(_parser(family, tools=True), text, cuts)
    [call] = message["tool_calls"]
    assert f'"days": {number}' in call["function"]["arguments"], (text[:200], message)


@pytest.mark.parametrize("family", NUMBER_FAMILIES + ["keyed_tags", "deepseek_v32", "minicpm3_kwargs", "kimi_k2"])
@pytest.mark.parametrize("number", ["1e999", "-2.5E+400", "7e-999"])
def test_a_number_past_a_doubles_range_is_kept_as_written(family: str, number: str) -> None:
    """Tagged and Python-call values keep a number a double cannot hold as the JSON number the
    model wrote, as JSON arguments do (not as a string, not as infinity)."""
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, None, "", [("get_weather", {"days": 7})], stop=False).replace("7", number, 1)
    message = analyses.parse(analysis, text, tools=TOOLS)
    assert json.loads(message["tool_calls"][0]["function"]["arguments"].replace(number, '"N"')) == {"days": "N"}
    assert f'"days": {number}' in message["tool_calls"][0]["function"]["arguments"]


# tagged formats, and JSON ones for comparison
KEY_FAMILIES = ["qwen3_coder", "glm45", "keyed_tags", "deepseek_v32", "minicpm3_kwargs", "hermes", "kimi_k2",
                "deepseek_r1"]


@pytest.mark.parametrize("family", KEY_FAMILIES)
def test_a_key_whose_value_had_not_begun_is_content(family: str) -> None:
    """Cut anywhere between an argument's key and its value, the call keeps its complete values,
    is marked incomplete, and the key comes back as content (`cut-off-calls`), streamed as whole."""
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, None, "", [("get_weather", {"city": "Paris", "days": 3})], stop=False)
    key = text.index("days")
    for cut in range(key + len("days"), text.index("3", key)):
        message = analyses.parse(analysis, text[:cut], tools=TOOLS)
        [call] = message["tool_calls"]
        assert call.get("incomplete") and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
        assert "days" in (message["content"] or ""), (text[:cut], message)


@pytest.mark.parametrize("arg_end", [", ", ","])
def test_an_unquoted_value_cut_in_the_next_key_ends_at_the_comma(arg_end: str) -> None:
    """Where string values are unquoted between `key=` and a comma (`name(city=Paris, days=3)`),
    an output cut after the comma, in the next key, ends the value there, as a JSON value whose
    call was cut in its next key: the call keeps `Paris`, is incomplete, and what was written of
    the key is content; streamed as whole."""
    analysis = analyses.llama32_pythonic()
    analysis.tools = ToolsAnalysis.from_dict({**analysis.tools.to_dict(), "arg_end": arg_end})
    text = analyses.render_output(analysis, None, "", [("get_weather", {"city": "Paris", "days": 3})], stop=False)
    after = text.index("Paris") + len("Paris")
    for cut in range(after, text.index("=3")):
        message = analyses.parse(analysis, text[:cut], tools=TOOLS)
        [call] = message["tool_calls"]
        assert call.get("incomplete") and json.loads(call["function"]["arguments"]) == {"city": "Paris"}, text[:cut]
        assert (message["content"] or "") == text[after:cut].lstrip(", "), (text[:cut], message)


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
@pytest.mark.parametrize(("family", "key"), [("qwen3_coder", "city"), ("glm45", "city"), ("keyed_tags", "city"),
                                             ("keyed_tags", "loc")])
def test_a_value_cut_inside_its_end_marker_keeps_the_marker_out_of_it(family: str, key: str, tools) -> None:
    """Cut inside the marker that ends a tagged value (`Paris\n</param`; `Paris</lo` of an end tag
    named after a key the schema does not name), the value is what came before the marker, the
    call is marked incomplete, and the part of the marker written is content (`cut-off-calls`),
    streamed as whole."""
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, None, "", [("get_weather", {key: "Paris", "days": 3})], stop=False)
    value_end = text.index("Paris") + len("Paris")
    marker_end = text.index(">", value_end) + 1
    for cut in range(text.index("<", value_end) + 1, marker_end):
        message = analyses.parse(analysis, text[:cut], tools=tools)
        [call] = message["tool_calls"]
        assert call.get("incomplete") and json.loads(call["function"]["arguments"]) == {key: "Paris"}, cut
        assert message["content"] == text[value_end:cut].strip(), cut


@pytest.mark.parametrize("family", ["hermes", "deepseek_r1", "qwen3_coder"])
def test_a_long_number_cut_off_keeps_its_digits(family: str) -> None:
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, "Thinking.", "", [("get_weather", {"days": 7})], stop=False)
    text = text[:text.index("7")] + "1" * 2000
    message = analyses.parse(analysis, text)
    assert "1" * 2000 in message["tool_calls"][0]["function"]["arguments"] + (message["content"] or "")


@pytest.mark.parametrize(("family", "name"), [("hermes", "get_weath\ner"), ("llama31", "get\tweather"),
                                              ("hermes", "get\\qx"), ("mistral_array", "a\u0001b")])
def test_a_quoted_name_with_raw_control_characters_never_raises(family: str, name: str) -> None:
    """The scanner lets raw control characters and lone backslashes through a JSON string; the
    name they are in is read as written (`json.loads` raised on it, in the whole parse and the
    stream)."""
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, None, "", [("get_weather", {"city": "Paris"})], stop=False)
    text = text.replace('"get_weather"', '"' + name + '"')
    for cut in (len(text), len(text) - 3):
        message = analyses.parse(analysis, text[:cut])
        assert not lost_letters(analysis, text[:cut], message) or message["tool_calls"][-1].get("incomplete")


def test_a_section_whose_first_call_fails_on_its_name_keeps_its_opener_streamed() -> None:
    """The text after a section's opener waits with it until the section's first call starts
    (`calls-wait-for-arguments`); a call that began well but whose start was still held when it
    failed (`get"...`: string arguments begun, nothing of them emitted) leaves the section text."""
    analysis = analyses.deepseek_r1()
    text = ("Thinking.</think>Hi." + analysis.tools.section_start + ":" + analysis.tools.call_start
            + 'function<｜tool▁sep｜>get"_weather\n```json\n{"')
    message = analyses.parse(analysis, text)  # whole, and one character per chunk: they must agree
    assert message["content"] == text[len("Thinking.</think>"):]


@pytest.mark.parametrize("family", ["deepseek_r1", "deepseek_v31", "hermes", "llama31", "mistral_array", "kimi_k2",
                                    "gpt_oss", "llama32_pythonic"])
def test_json_arguments_cut_anywhere_lose_nothing(family: str) -> None:
    """Cut at every character, a call keeps its complete values and the member (or marker) the
    output stopped inside comes back as content; streamed one character at a time as whole."""
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, "Think.", "Hi.", [("get_weather", {"city": "Paris", "days": 3}),
                                                             ("search_web", {"query": "cats"})], stop=False)
    for cut in range(len(text) + 1):
        message = analyses.parse(analysis, text[:cut])
        assert not lost_letters(analysis, text[:cut], message), (text[:cut], message)


@pytest.mark.parametrize("family", ["hermes", "mistral_array", "deepseek_r1", "kimi_k2", "gpt_oss", "minicpm3_kwargs",
                                    "lfm2_python", "qwen3_coder"])
def test_a_value_cut_inside_an_escape_keeps_its_backslash(family: str) -> None:
    """A string value cut right after a backslash (`"C:\\`, the escape cut in two): the value keeps
    the backslash as written (the call is incomplete), so that the one that completes the escape
    (`"C:\\\\`) leaves the value as it was; nothing written is lost at any cut or shown twice
    (`unplaced`: the backslash is the value's, not text), streamed one character at a time as
    whole."""
    analysis = getattr(analyses, family)()
    text = analyses.render_output(analysis, None, "Hi.", [("get_weather", {"city": "C:\\x"})], stop=False)
    lone = text.index("\\") + 1
    [call] = analyses.parse(analysis, text[:lone])["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "C:\\"} and call.get("incomplete")
    _nothing_lost_or_twice(analysis, text, lambda written: analyses.parse(analysis, written))


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
@pytest.mark.parametrize("family", FAMILIES)
def test_two_arguments_cut_anywhere_lose_nothing(family: str, tools) -> None:
    """Reasoning, content and a call of two arguments cut at every character: every letter and
    digit written is a whole marker or is in the message (a marker the output stopped inside
    included: it is content), and the stream equals the whole parse however the cut text is
    split in two and fed one character at a time."""
    analysis = getattr(analyses, family)()
    reasoning = "Think." if analysis.reasoning.mode != "none" else None
    text = analyses.render_output(analysis, reasoning, "Hi.", [("get_weather", {"city": "Paris", "days": 3})],
                                  stop=False)
    parser = Parser(analysis, tools=tools)
    for cut in range(len(text) + 1):
        written = text[:cut]
        message = analyses.parse(analysis, written, tools=tools)  # whole and one character at a time
        assert not lost_letters(analysis, written, message), (written, message)
        for split in range(0, cut + 1, max(1, cut // 5)):
            assert without_generated_ids(analyses.streamed_in_two(parser, written, split)) == \
                without_generated_ids(message), (written, split)


# -- calls as the elements of a JSON array --------------------------------------------------------

ARRAY_CALLS = ('[{"name": "get_weather", "arguments": {"city": "NY"}}, '
               '{"name": "get_weather", "arguments": {"city": "Paris"}}] Bye')
SECOND_CALL = ARRAY_CALLS.index(", {") + len(", ")
# the templates of the shared corpus that write their calls as a bare JSON array (cogito's with ids,
# after the arguments: a whole call is held for its id until the next call's text)
BARE_ARRAY_TEMPLATES = ["vllm__tool_chat_template_xlam_llama.jinja", "vllm__tool_chat_template_xlam_qwen.jinja",
                        "hfjs-ollama-automap__cogito-3b.jinja"]


def _array_parsers() -> list:
    """Parsers of calls written as a JSON array, each with the text before the array: the
    fixtures', and each bare-array corpus template's with and without tools."""
    parsers = [pytest.param((Parser(analyses.bare_json_array()), "Hello"), id="bare_json_array"),
               pytest.param((Parser(analyses.mistral_array()), "Hello[TOOL_CALLS]"), id="mistral_array")]
    # (without the shared corpus, the fixtures' parsers: only the corpus's tests skip)
    for path in corpora.shared_templates() if corpora.shared_corpus_dir() else []:
        if path.name in BARE_ARRAY_TEMPLATES:
            loaded = autoparser.load(str(path))
            parsers += [pytest.param((loaded.parser(tools=analyses.WEATHER_TOOLS), "Hello"), id=f"{path.stem}-tools"),
                        pytest.param((loaded.parser(), "Hello"), id=f"{path.stem}-no-tools")]
    return parsers


@pytest.fixture(scope="module", params=_array_parsers())
def array_parser(request):
    return request.param


def test_the_shared_corpus_holds_the_bare_array_templates() -> None:
    names = {path.name for path in corpora.shared_templates()}
    assert set(BARE_ARRAY_TEMPLATES) <= names


@pytest.mark.parametrize("tail", ['', '{', '{"', '{"name":', '{"name": "get_weather", "argu'])
def test_an_array_call_cut_in_its_header_is_content(array_parser, tail: str) -> None:
    """Cut inside the header of a call after a whole one (`, {"`), the whole call stays a call
    and what was written of the next one, the separator before it included, is content, as a
    failed call's separator is elsewhere (`cut-off-calls`); streamed in two as whole at every cut."""
    parser, before = array_parser
    text = before + ARRAY_CALLS[:SECOND_CALL] + tail
    message = without_generated_ids(parser.parse(text))
    assert message["content"] == "Hello" + (", " + tail).rstrip(), message
    [call] = message["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "NY"} and not call.get("incomplete")
    for cut in range(len(text) + 1):
        assert without_generated_ids(analyses.streamed_in_two(parser, text, cut)) == message, cut


def test_an_array_cut_anywhere_loses_nothing(array_parser) -> None:
    """Cut at every character: every letter and digit written is in the message (the members'
    keys and the section's marker aside, which are the calls' structure), and the stream equals
    the whole parse however the cut text is split in two."""
    parser, before = array_parser
    text = before + ARRAY_CALLS
    for end in range(len(text) + 1):
        written = text[:end]
        message = without_generated_ids(parser.parse(written))
        produced = " ".join([message["content"] or ""] + [f"{c['function']['name']} {c['function']['arguments']}"
                                                          for c in message["tool_calls"]])
        structure = re.sub(r'"(?:name|arguments)"|\[TOOL_CALLS\]', " ", written)
        assert not letters(structure) - letters(produced), (written, message)
        for split in range(0, end + 1, max(1, end // 12)):
            assert without_generated_ids(analyses.streamed_in_two(parser, written, split)) == message, \
                (written, split)


# -- every character, punctuation included ----------------------------------------------------------

def _two_calls(analysis) -> str:
    reasoning = "Think." if analysis.reasoning.mode != "none" else None
    written = [("get_weather", {"city": "Paris", "days": 3}), ("search_web", {"query": "cats"})]
    return analyses.render_output(analysis, reasoning, "Hi.", written if analysis.tools.parallel else written[:1],
                                  stop=False)


def _nothing_lost_or_twice(analysis, output: str, parse) -> None:
    """At every cut of `output`, what `parse` gives for it loses nothing written after the calls
    returned last changed (`losses_at_every_cut`) and shows no character written twice
    (`shown_twice`)."""
    twice = []

    def checked(written: str) -> dict:
        message = parse(written)
        doubled = shown_twice(written, message, analysis)
        if doubled:
            twice.append((written, doubled, message))
        return message

    losses = losses_at_every_cut(output, checked, marker_patterns(analysis), analysis.tools.array)
    assert not losses, losses[0]
    assert not twice, twice[0]


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["named", "unnamed"])
@pytest.mark.parametrize("family", sorted(name for name, make in analyses.FAMILIES.items() if make().tools.supported))
def test_two_calls_cut_anywhere_lose_no_character_and_show_none_twice(family: str, tools) -> None:
    """Cut at every character, every non-whitespace character written after the calls returned
    last changed (markers aside) is in the reasoning or the content, in order: brackets, quotes
    and separators of a call cut off before it could be returned included (`unplaced`); and no
    character written is given to two parts of the message (`shown_twice`: cut right after a
    Hermes call's `}}`, its object's `}` was a complete call's and the content's too); streamed
    one character at a time, and in two, as whole."""
    analysis = analyses.FAMILIES[family]()
    parser = Parser(analysis, tools=tools)

    def parse(written: str) -> dict:
        message = analyses.parse(analysis, written, tools=tools)  # whole and one character at a time
        for split in (len(written) // 3, len(written) - 1):
            assert without_generated_ids(analyses.streamed_in_two(parser, written, max(split, 0))) == \
                without_generated_ids(message), (written, split)
        return message

    _nothing_lost_or_twice(analysis, _two_calls(analysis), parse)


@pytest.mark.parametrize("tail", [', "id"', ', "id":', ', "id": ', ', "id": "'])
def test_an_id_member_cut_before_its_value_is_content(tail: str) -> None:
    """A whole call whose id member, written after its arguments, was cut off before the id's first
    character: the call is returned (incomplete, with an id of its own) and what was written of
    the member is content, as an argument's key is (`"id":` was dropped); streamed as whole."""
    analysis = analyses.mistral_array()
    head = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}'
    message = analyses.parse(analysis, "Hi." + head + tail)
    [call] = message["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert message["content"] == "Hi." + tail.rstrip()
    parser = Parser(analysis)
    for cut in range(len(head + tail) + 4):
        assert without_generated_ids(analyses.streamed_in_two(parser, "Hi." + head + tail, cut)) == \
            without_generated_ids(message), cut


FIXTURE_TEMPLATES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "templates").glob("*.jinja"))


@cache
def _round_trip_output(path: Path) -> tuple[autoparser.Analysis, str, bool | None] | None:
    """The template's analysis, its round-trip output of two calls (one where it writes no
    second), and the thinking flag it was parsed with; None where neither round-trips."""
    try:
        analysis = autoparser.analyze(path.read_text(encoding="utf-8"), bos_token=DS_BOS, eos_token=DS_EOS)
    except TemplateRenderError:
        return None
    if not analysis.tools.supported:
        return None
    for case in ("two_calls", "one_call"):
        result = run_case(analysis, case, probe_messages()[case])
        if result.status == "pass":
            return analysis, result.output, result.thinking
    return None


def _round_trip_cuts_lose_nothing(path: Path, every: int) -> None:
    """The template's round-trip output of calls (`_round_trip_output`; skipped where none
    round-trips), cut at every character: nothing lost or shown twice (`_nothing_lost_or_twice`),
    and the stream split in two equal to the whole parse, fed one character at a time too at
    every `every`th cut."""
    found = _round_trip_output(path)
    if found is None:
        pytest.skip("no tool call round-trips through this template")
    analysis, output, thinking = found
    parser = analysis.parser(tools=PROBE_TOOLS, thinking=thinking)

    def parse(written: str) -> dict:
        if len(written) % every == 0:
            message = analyses.parse(analysis, written, tools=PROBE_TOOLS, thinking=thinking)  # and char by char
        else:
            message = parser.parse(written)
        assert without_generated_ids(analyses.streamed_in_two(parser, written, len(written) // 2)) == \
            without_generated_ids(message), written
        return message

    _nothing_lost_or_twice(analysis, output, parse)


@pytest.mark.parametrize("path", FIXTURE_TEMPLATES, ids=lambda path: path.stem)
def test_fixture_calls_cut_anywhere_lose_no_character_and_show_none_twice(path: Path) -> None:
    """Each fixture family's own output of calls, cut at every character: nothing written after
    the calls returned last changed is lost (markers aside; `unplaced`), no character written is
    shown twice (`shown_twice`), and the stream, one character at a time and in two, equals the
    whole parse."""
    _round_trip_cuts_lose_nothing(path, every=1)


@pytest.mark.parametrize("path", corpora.shared_template_params())
def test_shared_corpus_calls_cut_anywhere_lose_no_character_and_show_none_twice(path) -> None:
    """Each shared-corpus template's own output of calls, cut at every character: nothing written
    after the calls returned last changed is lost (markers aside; `unplaced`), no character
    written is shown twice (`shown_twice`), and the stream split in two equals the whole parse
    (fed one character at a time too, at every 17th cut)."""
    _round_trip_cuts_lose_nothing(path, every=17)


@pytest.mark.parametrize("tail", [",", ", ", ", 4"])
@pytest.mark.parametrize("family", ["qwen3_coder", "glm45", "keyed_tags", "deepseek_v32"])
def test_a_tagged_number_cut_after_a_comma_is_its_text(family: str, tail: str) -> None:
    """A tagged value `3,` or `3, 4` has no brackets: it is its text, not an array (Python reads it
    as a tuple, so the call held `[3]`, brackets the output never held); streamed as whole."""
    analysis = getattr(analyses, family)()
    whole = analyses.render_output(analysis, None, "", [("get_weather", {"days": 3})], stop=False)
    written = whole[:whole.index("3") + 1] + tail
    message = analyses.parse(analysis, written, tools=TOOLS)  # whole and one character at a time
    [call] = message["tool_calls"]
    assert json.loads(call["function"]["arguments"])["days"].strip() == "3" + tail.rstrip(), message
    assert not shown_twice(written, message, analysis), message


@pytest.mark.parametrize("tail", ["x", " x", "}", "</s>"])
@pytest.mark.parametrize(("written", "kept", "text"), [('{"city"', {}, '"city"'), ('{"city": ', {}, '"city": '),
                                                      ('{"city": "Paris", "days"', {"city": "Paris"}, ', "days"')])
def test_a_call_awaiting_its_id_broken_in_its_arguments_keeps_their_text(written: str, kept: dict, text: str,
                                                                         tail: str) -> None:
    """A call whose id may follow its arguments holds them back; broken inside them (a key with no
    value, then text), it goes out where what it read of them ends and the rest is content, as
    where no id may follow (it went out where it failed: `"city"` was lost); streamed as whole.
    The end-of-turn marker is no text (the whitespace before it neither, as after content)."""
    output = 'Hi.[TOOL_CALLS][{"name": "get_weather", "arguments": ' + written + tail
    message = analyses.parse(analyses.mistral_array(), output)
    [call] = message["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == kept
    assert message["content"] == ("Hi." + text).rstrip() if tail == "</s>" else "Hi." + text + tail, message


@pytest.mark.parametrize("broken", ['{"na:e": ', '{"name": "get_weather", "argume}ts": ', '{"n\'ame": '])
def test_an_array_call_broken_after_a_whole_one_is_content_wherever_the_chunks_end(array_parser, broken: str) -> None:
    """A whole call, then one broken in its header: the whole call stays a call and the broken
    one, its separator included, is content, however the output is cut into chunks. A whole parse
    kept the reading of all of it as text (complete, where the reading of the call failed), a
    stream dropped that reading where a chunk ended after the call (`_calls_over_text`)."""
    parser, before = array_parser
    second = ARRAY_CALLS[SECOND_CALL:].replace('{"name": ', broken, 1)
    text = before + ARRAY_CALLS[:SECOND_CALL] + second
    message = without_generated_ids(parser.parse(text))
    assert message["content"] == "Hello, " + second, message
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [{"city": "NY"}]
    for cut in range(len(text) + 1):
        assert without_generated_ids(analyses.streamed_in_two(parser, text, cut)) == message, cut


@pytest.mark.parametrize("ids", [True, False], ids=["ids", "no-ids"])
@pytest.mark.parametrize("broken", ['{"na:e": ', '{"nme": ', '{"x": ', '{"name": "get_weather", "argume}ts": '])
def test_a_bare_array_call_with_ids_broken_after_a_whole_one_is_content(broken: str, ids: bool) -> None:
    """cogito-3b writes a bare array of calls, each with its id after its arguments: a whole call,
    then one broken in its header. The whole call is a call (with the id it was written with, or
    one of its own) and the broken one, its separator included, is content, as for xLAM's arrays
    without ids; a whole call waiting for an id that may still follow counted for no call, so the
    reading of all of it as text won (read whole and streamed alike); streamed one character at a
    time and split in two at every place as whole, and no prefix of it loses what it wrote (`unplaced`)."""
    path = next(p for p in corpora.shared_templates() if p.name == "hfjs-ollama-automap__cogito-3b.jinja")
    analysis = autoparser.load(str(path))
    output = run_case(analysis, "two_calls", probe_messages()["two_calls"]).output
    if not ids:
        output = re.sub(r', "id": "[^"]*"', "", output)
    second = output.index("}, {") + len("}, ")
    text = "Hello" + output[:second] + output[second:].replace('{"name": ', broken, 1)
    parser = analysis.parser(tools=PROBE_TOOLS)
    message = _agrees_whole_and_streamed(parser, text)
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "get_weather" and not call.get("incomplete"), message
    assert (call["id"] == "call1abcd") is ids
    assert message["content"] == "Hello, " + text[len("Hello") + second:], message

    def parse(written: str) -> dict:
        whole = parser.parse(written)
        assert without_generated_ids(analyses.streamed_in_two(parser, written, len(written) // 2)) == \
            without_generated_ids(whole), written
        return whole

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis), analysis.tools.array)
    assert not losses, losses[0]


@pytest.mark.parametrize(("family", "tail", "content"), [
    # the next call's opener then its end marker: that call is no call, and both markers are text
    ("deepseek_v31", "<｜tool▁call▁begin｜><｜tool▁call▁end｜>", "Hi.<｜tool▁call▁begin｜><｜tool▁call▁end｜>"),
    # a fence after a whole call: text, with the line break before it
    ("deepseek_r1", "\n```", "Hi.\n```"),
])
def test_text_after_a_whole_call_streams_as_read_whole_wherever_the_chunks_end(family: str, tail: str,
                                                                               content: str) -> None:
    """Found by appending markers to every cut of two calls. DeepSeek V3.1: read whole, the reading
    that failed choosing the next call's name still held the whole call before it, so the end
    marker after was taken for that call's (and dropped). R1: streamed, a reading that failed after
    another won over it because events went out in between, though both held them."""
    analysis = getattr(analyses, family)()
    whole_call = analyses.render_output(analysis, "Think.", "Hi.", [("get_weather", {"city": "Paris"})], stop=False)
    text = whole_call[:whole_call.index(analysis.tools.call_end) + len(analysis.tools.call_end)] + tail
    parser = Parser(analysis, tools=TOOLS)
    message = without_generated_ids(parser.parse(text))
    assert message["content"] == content and len(message["tool_calls"]) == 1, message
    for cut in range(len(text) + 1):
        assert without_generated_ids(analyses.streamed_in_two(parser, text, cut)) == message, cut


# -- a marker where a value begins ----------------------------------------------------------------

def _mistral_array_outputs() -> list:
    """(analysis, tools, its output of one call) for the fixture family and Mistral templates that
    write calls as `[TOOL_CALLS][{...}]`, each with and without tools."""
    found = [(analyses.mistral_array(), analyses.render_output(
        analyses.mistral_array(), None, "", [("get_weather", {"location": "Paris, France", "days": 3})],
        stop=False), "mistral_array")]
    for path in [p for p in llamacpp_templates() if p.name == "mistralai-Mistral-Nemo-Instruct-2407.jinja"] + \
            [p for p in corpora.shared_templates() if p.name == "vllm__tool_chat_template_mistral.jinja"]:
        analysis = autoparser.load(str(path))
        found.append((analysis, run_case(analysis, "one_call", probe_messages()["one_call"]).output, path.stem))
    return [pytest.param(analysis, tools, output, id=f"{name}-{'tools' if tools else 'no-tools'}")
            for analysis, output, name in found for tools in (PROBE_TOOLS, None)]


@pytest.mark.parametrize(("value", "kept"), [("Paris", {}), ("3", {"location": "Paris, France"})],
                         ids=["first-value", "second-value"])
@pytest.mark.parametrize(("analysis", "tools", "output"), _mistral_array_outputs())
def test_a_calls_marker_where_a_value_begins_breaks_the_call(analysis, tools, output: str, value: str,
                                                            kept: dict) -> None:
    """`[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": [TOOL_CALLS]`: the marker that
    opens the calls, where an argument's value begins, is that marker, not an array (its `[` was
    the value and its name was lost). The value breaks off there, as at a marker no JSON value
    begins with (`<tool_call>` in Hermes): the call keeps its complete values and is marked
    incomplete, the member cut off and the marker are content; stream and whole agree at every
    split, and nothing written is lost (`unplaced`)."""
    opener = analysis.tools.section_start.strip()
    assert output.startswith(opener)
    at = output.index(value, output.index('"arguments"'))
    text = output[:at - (output[at - 1] == '"')] + opener  # the value's quote too
    parser = analysis.parser(tools=tools)
    message = _agrees_whole_and_streamed(parser, text)
    [call] = message["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == kept, message
    assert message["content"].endswith(": " + opener), message

    def parse(written: str) -> dict:
        return _agrees_whole_and_streamed(parser, written)

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis), analysis.tools.array)
    assert not losses, losses[0]


# -- a whole section written again after a call that broke ----------------------------------------------

def _one_call_outputs() -> list:
    """(analysis, tools, its output of one call, that call's first value) for the Mistral
    `[TOOL_CALLS][{...}]` outputs above, a bare JSON array of calls (no marker opens it) and
    families whose calls end in markers, each with and without tools."""
    found = [pytest.param(*param.values, "Paris", id=param.id) for param in _mistral_array_outputs()]
    for family in ("bare_json_array", "hermes", "deepseek_v31", "kimi_k2", "mistral_compact"):
        analysis = getattr(analyses, family)()
        output = analyses.render_output(analysis, None, "", [("get_weather", {"city": "Paris"})], stop=False)
        found += [pytest.param(analysis, tools, output, "Paris", id=f"{family}-{'tools' if tools else 'no-tools'}")
                  for tools in (TOOLS, None)]
    return found


@pytest.mark.parametrize(("analysis", "tools", "output", "value"), _one_call_outputs())
def test_a_whole_section_after_a_broken_call_is_read_as_calls(analysis, tools, output: str, value: str) -> None:
    """`[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": }` then the whole section
    written again: the broken call is kept incomplete (its text content), and the section after
    it is read as a call (policy rule `nothing-lost`: reading starts again where a later call or a
    later section begins, not only where a later call in the same section does; a call that ends
    only in punctuation has no end marker to go on after). Stream and whole agree however the
    chunks come, and nothing written is lost (`unplaced`)."""
    at = output.index(value)
    broken = output[:at - (output[at - 1] == '"')] + "}"
    text = broken + output
    parser = analysis.parser(tools=tools)
    whole = without_generated_ids(parser.parse(output))
    [wanted] = whole["tool_calls"]
    message = _agrees_whole_and_streamed(parser, text)
    *before, last = message["tool_calls"]
    assert last == wanted and not last.get("incomplete"), message
    assert all(call.get("incomplete") for call in before), message
    assert value not in (message["content"] or ""), message

    def parse(written: str) -> dict:
        return without_generated_ids(parser.parse(written))

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis), analysis.tools.array)
    assert not losses, losses[0]


# -- whitespace after a value the arguments could not go on from --------------------------------------

@pytest.mark.parametrize("gap", [" ", "   ", "\n\t "])
@pytest.mark.parametrize("value", ['"Boston"', "3", "[1, 2]", '{"a": 1}'])
def test_whitespace_between_a_value_and_the_text_that_breaks_the_arguments_is_content(value: str, gap: str) -> None:
    """`{"city": "Boston" oops}`: the call keeps the value and is incomplete, and the text after
    the value, the whitespace before `oops` included, is content (it went into the arguments,
    `{"city": "Boston" }`, and no channel had it)."""
    analysis = analyses.deepseek_v31()
    text = "Sure. " + DS_SECTION[0] + DS_CALL[0] + "get_weather" + DS_SEP + '{"city": ' + value + gap + "oops}" + \
        DS_CALL[1] + DS_SECTION[1]
    message = analyses.whole_checked_by_streams(Parser(analysis), text)
    [call] = message["tool_calls"]
    assert call["incomplete"] and call["function"]["arguments"] == '{"city": ' + value + "}"
    assert message["content"].startswith("Sure. " + gap + "oops}"), message


@pytest.mark.parametrize("gap", [" ", "  \n"])
def test_a_bare_json_call_kept_at_the_undecided_limit_gives_the_whitespace_after_its_value_to_content(
        monkeypatch, gap: str) -> None:
    """A bare JSON call undecided past the limit (policy rule `undecided-too-long`) is kept
    incomplete where it breaks after its argument (`..."Paris" oops}}`): the whitespace between
    the value's closing quote and `oops` is content, not arguments. The limit is lowered so that
    every split in two can be checked."""
    for reader_part in (interpret, commits):  # the modules of the reader that read the limit
        monkeypatch.setattr(reader_part, "UNDECIDED_LIMIT", 600)
    analysis = autoparser.load(str(FIXTURES / "bare_json.jinja"))
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS)
    head = analyses.render_output(analysis, None, "", [("get_weather", {"city": "x"})]).split('"x"')[0] + '"'
    big = ("lorem ipsum dolor sit amet, " * 30)[:700 - len(head)]
    message = analyses.whole_checked_by_streams(parser, "Hi " + head + big + '"' + gap + "oops}}")
    [call] = message["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == {"city": big}
    assert message["content"] == "Hi " + gap + "oops}}"


@cache
def _gemma4(name: str) -> autoparser.Analysis:
    return autoparser.load(str(next(p for p in llamacpp_templates() if p.name == name)))


GEMMA4 = ["google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"]


@pytest.mark.parametrize("name", GEMMA4)
@pytest.mark.parametrize("text, reasoning", [
    ("<|channel>thou", "thou"),
    ("<|channel>t", "t"),
    ("<|channel>", None),
    ('<|channel>though:<|"|>t plan<channel|>Answer', 'though:<|"|>t plan'),
    ("<|channel>thoughtful plan<channel|>Answer", "thoughtful plan"),
])
def test_the_reasoning_tag_alone_is_markup_that_opens_reasoning(name: str, text: str, reasoning: str | None) -> None:
    """Gemma 4: `<|channel>` with its word `thought` cut off or misspelt opens reasoning by itself
    (the language's `bare-opener`), so its text is markup and what follows it the reasoning,
    however the output is cut into chunks; nothing written is lost, the tag counted as the
    marker it is (`unplaced.reading_markers`)."""
    analysis = _gemma4(name)
    assert "<|channel>" in marker_texts(analysis)
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = _agrees_whole_and_streamed(parser, text)
    assert whole["reasoning_content"] == reasoning
    assert not lost_letters(analysis, text, whole), whole
    losses = losses_at_every_cut(text, lambda written: _agrees_whole_and_streamed(parser, written),
                                 marker_patterns(analysis))
    assert not losses, losses[0]


@pytest.mark.parametrize("name", GEMMA4)
@pytest.mark.parametrize("text, arguments, content", [
    ('<|tool_call>call:get_weather{code:<|"|>abc}', {"code": "abc"}, "}"),
    ('<|tool_call>call:get_weather{code:<|"|>def f():\n    return {a: [1]}\n}<too',
     {"code": "def f():\n    return {a: [1]}\n"}, "}<too"),
    ('<|tool_call>call:get_weather{days:3,code:<|"|>abc}<tool_c', {"days": 3, "code": "abc"}, "}<tool_c"),
    ('<|tool_call>call:get_weather{city:<|"|>Oslo}<tool', {"city": "Oslo"}, "}<tool"),
])
def test_a_value_of_a_key_the_tool_does_not_name_cut_in_the_calls_end_marker_is_kept(
        name: str, text: str, arguments: dict, content: str) -> None:
    """Gemma 4: the output stops inside the call's end marker (`}<tool_call|>`) right after a
    value of a key the tool's schema does not name (an extra member, held until it ends). The
    value ran to the end of the output, the marker after it begun: the call is cut off there and
    keeps the value, as it does a named key's, and the marker begun is content. It was dropped
    (`{}`, content `}`) where the member's value was held rather than streamed."""
    analysis = _gemma4(name)
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = _agrees_whole_and_streamed(parser, text)
    [call] = whole["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == arguments
    assert whole["content"] == content
    assert not lost_letters(analysis, text, whole), whole


@pytest.mark.parametrize("name", GEMMA4)
@pytest.mark.parametrize("text, arguments, content", [
    # a named integer's value runs on past the `}` of a broken end marker to the end of the turn
    ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}h3<tool_call|>Done.<turn|>',
     {"city": "Paris", "days": "3}h3<tool_call|>Done."}, None),
    # an object one brace too deep: its brackets close where the call's end marker should begin
    ('<|tool_call>call:get_weather{options:{{"b": null}}<tool_call|>', {"options": '{{"b": null}}'}, "<tool_call|>"),
    # a number closed by a string's quote, then text where the next member should be
    ('<|tool_call>call:get_weather{days:-12500.0<|"|>call:,city:[1.0, "two", [3]]}<tool_call|>',
     {"days": -12500.0}, 'call:,city:[1.0, "two", [3]]'),
    # a key the schema does not name, its value running on to the end of the turn
    ('<|tool_call>call:get_weather{zz:12345678901234567890}<tooXl_call|>Then.<turn|>',
     {"zz": "12345678901234567890}<tooXl_call|>Then."}, None),
    ('<|tool_call>call:get_weather{zz:[1, 2]<|"|>Then text.<turn|>', {"zz": [1, 2]}, '<|"|>Then text.'),
])
def test_a_held_value_read_to_its_end_is_kept_where_its_call_breaks_after_it(
        name: str, text: str, arguments: dict, content: str | None) -> None:
    """Gemma 4: a call breaks before the end of the output right after an argument whose value
    is held until it ends (a number, an object, a key the schema does not name), its value read
    to its end. The argument is kept and the call marked incomplete; what follows is content
    (the end-of-turn marker aside: it is no text).
    The value's text was in neither (the failed reading's mark was already past it), however
    the output is cut into chunks."""
    analysis = _gemma4(name)
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = _agrees_whole_and_streamed(parser, text)
    [call] = whole["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == arguments
    assert whole["content"] == content, whole
    assert not lost_letters(analysis, text, whole), whole


def _in_chunks(parser, text: str, size: int) -> dict:
    stream = parser.stream()
    for at in range(0, len(text), size):
        stream.feed(text[at:at + size])
    stream.finish()
    return without_generated_ids(stream.message())


@pytest.mark.parametrize("text", [
    "<tool_call></think></tool_call>\n<think>l",
    "<tool_call></think></tool_call><think>l",
    "<tool_call>Let me think about the weather. It's probably mild.</think><tool_call>search\n<arg_key>query</arg_key>\n"
    "<arg_value>x</arg_value>\n</tool_call>\n<think>run_code\n<arg_key>n</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
])
def test_reading_again_where_a_reading_failed_after_whitespace_a_stream_let_out(text: str) -> None:
    """GLM-4.5: a broken call read as text, then whitespace and `<think>` where the reading
    fails. Read whole, the whitespace is held by the failed reading and the language is read
    again from where it failed; streamed a character at a time, the whitespace went out before
    the failure, and the language was read again a character on (`<think>` content, not markup).
    Whether the failed reading read up to where it failed decides, emitted or not: one message
    however the output is cut, nothing lost."""
    analysis = analyses.glm45()
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = analyses.whole_checked_by_streams(parser, text)
    assert all(_in_chunks(parser, text, size) == whole for size in (2, 3, 4, 5))
    assert not lost_letters(analysis, text, whole), whole


@pytest.mark.parametrize("text", [
    "<tool_call><function=search><parameter=n>>\n<tool_call><function=",
    "<tool_call>\n<function=search>\n<parameter=n>\n12345678901234567890\n\n</function>\n</tool_call>\n<tool_call>\n"
    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><|im_end|>",
])
def test_a_held_value_kept_where_its_call_breaks_ends_before_the_whitespace_there(text: str) -> None:
    """Qwen3-Coder: a key the tool does not name (held until it ends), its end tag left out, then
    a line break and a marker where the reading fails. Where the chunks ended decided whether
    the value or the marker that failed read the line break: the value kept ends before it, and
    the whitespace before the failure is not the value's. One message however the output is cut."""
    analysis = analyses.qwen3_coder()
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = analyses.whole_checked_by_streams(parser, text)
    assert all(_in_chunks(parser, text, size) == whole for size in (2, 3, 4, 5))
    call = whole["tool_calls"][0]
    assert call["incomplete"] and not json.loads(call["function"]["arguments"])["n"].endswith("\n")
    assert not lost_letters(analysis, text, whole), whole


def test_the_end_tag_begun_after_a_held_value_kept_where_its_call_breaks_is_content() -> None:
    """Keyed tags: `<query>xx</query</invoke>`, a key the tool does not name, its end tag begun
    and broken. The value is kept and the call incomplete; the end tag begun is content, as
    where the output is cut off there (the argument's event no longer stands past it)."""
    analysis = analyses.keyed_tags()
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS)
    text = 'Sure.<tool_calls>\n<invoke name="get_weather">\n<query>xx</query</invoke>\n>\n</tool_calls>'
    whole = analyses.whole_checked_by_streams(parser, text)
    assert all(_in_chunks(parser, text, size) == whole for size in (2, 3, 4, 5))
    [call] = whole["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == {"query": "xx"}
    assert "</query" in whole["content"]
    assert not lost_letters(analysis, text, whole), whole
