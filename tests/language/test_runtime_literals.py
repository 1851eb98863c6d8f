"""Unit tests of the runtime's newer formats: Python call syntax, keys without markers, calls
opened by the generation prompt, keyed end tags, and values printed the Python way."""

from __future__ import annotations

import json
from typing import Any

import analyses
import pytest
from analyses import WEATHER_TOOLS, calls, parse

from autoparser.language.reading import Parser
from autoparser.language.values import NotALiteral, decode_escape, decode_string_body, literal_to_json

TOOLS = WEATHER_TOOLS + [
    {"type": "function", "function": {"name": "toggle", "parameters": {"type": "object", "properties": {
        "on": {"type": "boolean"}, "tags": {"type": "array"}, "extra": {"type": "null"}}}}},
]
LFM = ("<|tool_call_start|>[", "]<|tool_call_end|>")


# -- Python literals -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("3", 3), ("-2.5", -2.5), ("True", True), ("None", None), ("'it\\'s'", "it's"),
    ("[1, 'a', None]", [1, "a", None]), ("(1, 2)", [1, 2]), ("(3,)", [3]), ("()", []), ("{'a': {'b': False}}", {"a": {"b": False}}),
    ('{"a": true, "b": null}', {"a": True, "b": None}), ("{'a': true}", {"a": True}), ("{1: 2}", {"1": 2}),
    ('"\\ud83d\\ude00"', "😀"), ("{'urgent', 'bug', 'a'}", ["urgent", "bug", "a"]),
    ("{'k': ({'z', 'y'},)}", {"k": [["z", "y"]]}),
])
def test_literals_become_json(text: str, value: Any) -> None:
    assert literal_to_json(text) == value


@pytest.mark.parametrize("text", ["abc", "0x1F", "1e999", "f(1)", "__import__('os')", "1 +", "", "{1, [2]}",
                                  # tuples without brackets: no value a template writes
                                  "3,", "3, 4", "(1), (2)", "'a', 'b'"])
def test_what_is_no_literal(text: str) -> None:
    with pytest.raises(NotALiteral):
        literal_to_json(text)


def test_escapes_decode_as_python_does() -> None:
    assert decode_string_body(r"a\nb\t\x41\u00e9\U0001F600\101\q\/") == "a\nb\tAé😀A\\q/"
    assert decode_string_body(r"lone \ud800 surrogate") == "lone \ufffd surrogate"
    assert decode_escape("\\x4", 0, final=False) is None  # cut short: wait for more
    assert decode_escape("\\", 0, final=True) == ("\\", 1)


def test_python_call_syntax() -> None:
    text = (f"Let me look.{LFM[0]}get_weather(city='Paris, France', days=3, options={{'units': 'metric'}}), "
            f"toggle(on=True, tags=['a', 'b'], extra=None){LFM[1]}<|im_end|>")
    message = parse(analyses.lfm2_python(), text, tools=TOOLS)
    assert message["content"] == "Let me look."
    assert calls(message) == [("get_weather", {"city": "Paris, France", "days": 3, "options": {"units": "metric"}}),
                              ("toggle", {"on": True, "tags": ["a", "b"], "extra": None})]


def test_python_strings_with_escapes_quotes_and_markers() -> None:
    text = (f"{LFM[0]}get_weather(city='it\\'s \"x\"\\n<|tool_call_end|> ]) ', days=1), "
            f"get_weather(city=\"a', b=c\"){LFM[1]}")
    message = parse(analyses.lfm2_python(), text, tools=TOOLS)
    assert calls(message) == [("get_weather", {"city": "it's \"x\"\n<|tool_call_end|> ]) ", "days": 1}),
                              ("get_weather", {"city": "a', b=c"})]


def test_unescaped_quotes_end_a_string_only_where_the_call_continues() -> None:
    # templates that write "'" + value + "'" leave quotes inside the text as they are
    text = f"{LFM[0]}get_weather(city='He said 'hi', then left', days=2){LFM[1]}"
    assert calls(parse(analyses.lfm2_python(), text, tools=TOOLS)) == [
        ("get_weather", {"city": "He said 'hi', then left", "days": 2})]


def test_string_values_stream_as_they_arrive() -> None:
    stream = Parser(analyses.lfm2_python(), tools=TOOLS).stream()
    stream.feed(f"{LFM[0]}get_weather(city='Par")
    arguments = "".join(d["tool_calls"][0]["function"].get("arguments", "")
                        for d in stream.feed("is") if "tool_calls" in d)
    assert arguments == "is"


def test_quoted_number_for_an_integer_parameter() -> None:
    text = f"{LFM[0]}get_weather(days='4', city=3){LFM[1]}"
    assert calls(parse(analyses.lfm2_python(), text, tools=TOOLS)) == [("get_weather", {"days": 4, "city": "3"})]


def test_json_values_as_keyword_arguments() -> None:
    text = ('<|tool_call_start|>\n```python\nget_weather(city="Paris, France",days=3,options={"a": [1, null]})\n'
            'search(query="x")\n```\n<|tool_call_end|>')
    assert calls(parse(analyses.minicpm3_kwargs(), text, tools=TOOLS)) == [
        ("get_weather", {"city": "Paris, France", "days": 3, "options": {"a": [1, None]}}), ("search", {"query": "x"})]


def test_a_bracket_that_opens_no_call_stays_content() -> None:
    message = parse(analyses.llama32_pythonic(), "See [1, 2] and [note(s)].", tools=TOOLS)
    assert message == {"role": "assistant", "reasoning_content": None, "content": "See [1, 2] and [note(s)].",
                       "tool_calls": []}


def test_cut_off_inside_a_python_string() -> None:
    message = parse(analyses.lfm2_python(), f"{LFM[0]}get_weather(city='Par", tools=TOOLS)
    assert calls(message) == [("get_weather", {"city": "Par"})]
    assert message["tool_calls"][0]["incomplete"] is True


# -- keys without markers, raw values ------------------------------------------------------------


def test_unquoted_values_with_commas_and_parentheses() -> None:
    text = "[get_weather(city=Paris, France (west), days=3), search(query=a, b)]<|eot_id|>"
    assert calls(parse(analyses.llama32_pythonic(), text, tools=TOOLS)) == [
        ("get_weather", {"city": "Paris, France (west)", "days": 3}), ("search", {"query": "a, b"})]


def test_the_last_value_ends_at_the_call_end() -> None:
    # `arg_end` (`, `) is written between values only: the last one ends at `)`
    text = "[get_weather(days=3, city=Rome)]"
    assert calls(parse(analyses.llama32_pythonic(), text, tools=TOOLS)) == [("get_weather", {"days": 3, "city": "Rome"})]


def test_a_call_with_no_arguments() -> None:
    assert calls(parse(analyses.lfm2_python(), f"{LFM[0]}search(){LFM[1]}", tools=TOOLS)) == [("search", {})]


def test_text_that_is_no_call_inside_the_section_stays_content() -> None:
    message = parse(analyses.lfm2_python(), f"{LFM[0]}not a call{LFM[1]}", tools=TOOLS)
    assert message["tool_calls"] == []
    assert message["content"] == f"{LFM[0]}not a call{LFM[1]}"


# -- calls opened by the prompt ------------------------------------------------------------------


def test_output_starts_with_a_call_name() -> None:
    text = 'get_weather\n{"city": "Paris"}>>>search\n{"query": "x"}<|eot_id|>'
    message = parse(analyses.functionary_v32(), text, tools=TOOLS)
    assert message["content"] is None
    assert calls(message) == [("get_weather", {"city": "Paris"}), ("search", {"query": "x"})]


def test_recipient_introduces_content() -> None:
    text = 'all\nI will check all of it.>>>get_weather\n{"city": "Paris"}>>>all\nDone, all good.'
    message = parse(analyses.functionary_v32(), text, tools=TOOLS)
    assert message["content"] == "I will check all of it.Done, all good."
    assert calls(message) == [("get_weather", {"city": "Paris"})]


def test_recipient_with_tools_off() -> None:
    message = parse(analyses.functionary_v32(), "all\nHello.", tool_choice="none")
    assert (message["content"], message["tool_calls"]) == ("Hello.", [])


def test_a_name_starting_like_the_recipient_is_a_call() -> None:
    tools = [{"type": "function", "function": {"name": "allocate", "parameters": {}}}]
    message = parse(analyses.functionary_v32(), 'allocate\n{"n": 1}', tools=tools)
    assert calls(message) == [("allocate", {"n": 1})]


def test_opened_tagged_call() -> None:
    text = ("get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n"
            "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>x</arg_value>\n</tool_call>")
    assert calls(parse(analyses.glm4_tool_only(), text, tools=TOOLS)) == [
        ("get_weather", {"city": "Paris"}), ("search", {"query": "x"})]


def test_opened_header_that_holds_no_call_is_content() -> None:
    message = parse(analyses.glm4_tool_only(), "Sorry, I cannot.", tools=TOOLS)
    assert (message["content"], message["tool_calls"]) == ("Sorry, I cannot.", [])


# -- other shapes ----------------------------------------------------------------------------------


def test_end_tags_named_after_the_key() -> None:
    text = ('<tool_calls>\n<invoke name="get_weather">\n<city>a </b> c</city>\n<days>3</days>\n</invoke>\n'
            "</tool_calls>")
    assert calls(parse(analyses.keyed_tags(), text, tools=TOOLS)) == [("get_weather", {"city": "a </b> c", "days": 3})]


def test_a_call_named_right_after_the_section_start() -> None:
    text = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
    assert calls(parse(analyses.gpt_oss(), text, tools=TOOLS)) == [("get_weather", {"city": "Paris"})]


def test_raw_values_printed_the_python_way() -> None:
    # `{{ value }}` in a template prints True, None and {'a': 1}; string parameters stay as written
    text = ("<tool_call>\n<function=toggle>\n<parameter=on>\nTrue\n</parameter>\n<parameter=tags>\n['x', None]\n"
            "</parameter>\n</function>\n</tool_call><tool_call>\n<function=get_weather>\n<parameter=city>\nNone\n"
            "</parameter>\n<parameter=options>\n{'a': 1}\n</parameter>\n</function>\n</tool_call>")
    assert calls(parse(analyses.qwen3_coder(), text, tools=TOOLS)) == [
        ("toggle", {"on": True, "tags": ["x", None]}), ("get_weather", {"city": "None", "options": {"a": 1}})]


def test_cdata_around_a_raw_string() -> None:
    text = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value><![CDATA[a </arg_value> b]]>"
            "</arg_value>\n</tool_call>")
    assert calls(parse(analyses.glm45(), text, tools=TOOLS)) == [("get_weather", {"city": "a </arg_value> b"})]


def test_numbers_keep_their_spelling() -> None:
    text = "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>1e2</arg_value>\n</tool_call>"
    message = parse(analyses.glm45(), text, tools=TOOLS)
    assert message["tool_calls"][0]["function"]["arguments"] == '{"days": 1e2}'


def test_mistral_id_after_the_arguments_is_read() -> None:
    text = '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Tokyo"}, "id": "abc123xyz"}]</s>'
    message = parse(analyses.mistral_array(), text, tools=TOOLS)
    assert calls(message) == [("get_weather", {"city": "Tokyo"})]
    assert message["tool_calls"][0]["id"] == "abc123xyz"


def test_mistral_call_cut_off_before_its_id() -> None:
    message = parse(analyses.mistral_array(), '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "To',
                    tools=TOOLS)
    assert calls(message) == [("get_weather", {"city": "To"})]
    assert message["tool_calls"][0]["incomplete"] is True


# -- values a template writes raw, which models write as Python literals ---------------------------

LITERAL_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "role": {"type": ["string", "null"]}, "aliases": {"type": "array"},
    "days": {"type": "integer"}}}}}]


@pytest.mark.parametrize("tools", [LITERAL_TOOLS, None], ids=["typed", "no-tools"])
@pytest.mark.parametrize(("text", "arguments"), [
    ("[get_weather(city='San Francisco', role=None, aliases=['a'])]",
     {"city": "San Francisco", "role": None, "aliases": ["a"]}),
    ("[get_weather(city=\"it's, here\", days=3)]", {"city": "it's, here", "days": 3}),
    ("[get_weather(city=San Francisco, days=3)]", {"city": "San Francisco", "days": 3}),
])
def test_raw_values_written_as_python_literals_are_their_values(text: str, arguments: dict, tools: Any) -> None:
    """The template writes `city=San Francisco`; a model writes `city='San Francisco'`, `None`,
    lists: in `name(key=value)` calls a value that is a literal is read as one
    (`ir.RawString.literals`), streamed or whole."""
    message = parse(analyses.llama32_pythonic(), text, tools=tools)
    assert calls(message) == [("get_weather", arguments)]


# -- literal spellings are the language's ---------------------------------------------------------


def _respelled(data: Any, **spelling: str) -> Any:
    """A language written as JSON data with every value's literal spelling changed."""
    if isinstance(data, dict):
        if data.get("$node") == "Spelling":
            return {**data, **spelling}
        return {key: _respelled(value, **spelling) for key, value in data.items()}
    return [_respelled(item, **spelling) for item in data] if isinstance(data, list) else data


def _arguments(language: Any, text: str) -> tuple[list[str], str]:
    """The calls' arguments read whole, and the arguments streamed one character at a time."""
    from autoparser.language.interpret import LanguageReader

    whole = [call["function"]["arguments"] for call in LanguageReader(language).parse(text)["tool_calls"]]
    stream = LanguageReader(language).stream()
    events = [event for char in text for event in stream.feed(char)] + stream.finish()
    streamed = "".join(d["function"].get("arguments", "") for e in events for d in e.get("tool_calls", []))
    return whole, streamed


def test_the_reader_reads_literals_as_the_language_spells_them() -> None:
    """The quotes (and the rest of a literal's spelling) are data on the value nodes: a language
    whose values are quoted with backticks reads backticks as quotes and Python's quotes as text,
    whole and streamed alike, with no change to the reader."""
    from autoparser.language import ir
    from autoparser.language.build import Request, build_language

    language = build_language(analyses.llama32_pythonic(), Request(tools=tuple(WEATHER_TOOLS), reading=True,
                                                                   lazy=False))
    respelled = ir.from_json(_respelled(ir.to_json(language), quotes="`", null="nil"))
    assert respelled != language
    backticks, python = "[get_weather(city=`Pa'ris, x`)]", "[get_weather(city='Paris')]"
    assert _arguments(language, python) == (['{"city": "Paris"}'], '{"city": "Paris"}')
    assert _arguments(respelled, backticks) == (['{"city": "Pa\'ris, x"}'], '{"city": "Pa\'ris, x"}')
    assert _arguments(respelled, python) == (['{"city": "\'Paris\'"}'], '{"city": "\'Paris\'"}')
    # a value written as a literal of any type (`ir.PyValue`)
    language = build_language(analyses.lfm2_python(), Request(tools=tuple(WEATHER_TOOLS), reading=True, lazy=False))
    respelled = ir.from_json(_respelled(ir.to_json(language), quotes="`", opens="<", closes=">"))
    call = "<|tool_call_start|>[get_weather(city={}, days=3, options={})]<|tool_call_end|>"
    assert _arguments(respelled, call.format("`Pa'ris`", "<1, 2>")) == \
        (['{"city": "Pa\'ris", "days": 3, "options": "<1, 2>"}'], '{"city": "Pa\'ris", "days": 3, "options": "<1, 2>"}')


def _renulled(data: Any, word: str) -> Any:
    """A language written as JSON data with every raw string's word for null changed."""
    if isinstance(data, dict):
        if data.get("$node") == "RawString":
            return {**{key: _renulled(value, word) for key, value in data.items()}, "null": word}
        return {key: _renulled(value, word) for key, value in data.items()}
    return [_renulled(item, word) for item in data] if isinstance(data, list) else data


def test_a_raw_strings_word_for_null_is_the_languages() -> None:
    """A nullable string written as raw text is null where its text is the node's null word
    (`ir.RawString.null`, JSON's `null` as the builder states it), whole and streamed alike."""
    from autoparser.language import ir
    from autoparser.language.build import Request, build_language
    from autoparser.language.interpret import LanguageReader

    tool = {"type": "function", "function": {"name": "set_nullable_str", "parameters": {
        "type": "object", "properties": {"name": {"type": ["string", "null"]}}}}}
    language = build_language(analyses.qwen3_coder(), Request(tools=(tool,), lazy=False, reading=True))
    text = "<tool_call>\n<function=set_nullable_str>\n<parameter=name>\n{}\n</parameter>\n</function>\n</tool_call>"

    def read(language: Any, word: str) -> tuple[str, str]:
        whole = LanguageReader(language).parse(text.format(word))["tool_calls"][0]["function"]["arguments"]
        stream = LanguageReader(language).stream()
        events = [event for char in text.format(word) for event in stream.feed(char)] + stream.finish()
        return whole, "".join(d["function"].get("arguments", "") for e in events for d in e.get("tool_calls", []))

    assert read(language, "null") == ('{"name": null}',) * 2
    renulled = ir.from_json(_renulled(ir.to_json(language), "nil"))
    assert renulled != language
    assert read(renulled, "nil") == ('{"name": null}',) * 2
    assert read(renulled, "null") == ('{"name": "null"}',) * 2


def test_an_unquoted_value_with_escaped_quotes_is_kept_as_written() -> None:
    """A quote that never closes in a value that is no literal: the text as the model wrote it
    (its conversion reads such a quote to the end once, not from every later quote again)."""
    analysis = analyses.llama32_pythonic()
    parser = analysis.parser(tools=analyses.WEATHER_TOOLS)
    value = 'abc \\" ' * 200 + "Paris"
    message = parser.parse(f"[search(), search(city={value})]")
    assert json.loads(message["tool_calls"][-1]["function"]["arguments"]) == {"city": value}
