"""The streaming reader of the output language (`language.interpret`) on outputs that stray from
the language: nothing is lost, calls that are calls are kept, and a stream gives the message a
whole read gives. Each case is also read by the runtime, which must give the same message.

The outputs are what a model writes when it leaves the grammar (unconstrained generation): text
after the calls, a call to a tool that was not offered followed by a real one, an output cut off
by `max_tokens` inside a call's arguments.
"""

from __future__ import annotations

import json

import analyses
import corpora
import pytest
from analyses import WEATHER_TOOLS, streamed_in_random_chunks, streamed_in_two, without_generated_ids
from test_runtime_properties import TOOLS as PROPERTY_TOOLS

import autoparser
from autoparser.language import ir
from autoparser.language.build import Request, build_language
from autoparser.language.interpret import LanguageReader

FORMATS = {"hermes": analyses.hermes, "qwen3_coder": analyses.qwen3_coder}
CALLS = {
    "hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
               '<tool_call>\n{"name": "unknown_tool", "arguments": {"city": "Paris"}}\n</tool_call>'),
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
                    "<tool_call>\n<function=unknown_tool>\n<parameter=city>\nParis\n</parameter>\n"
                    "</function>\n</tool_call>"),
}


def reader(family: str) -> LanguageReader:
    analysis = FORMATS[family]()
    request = Request(tools=tuple(WEATHER_TOOLS), lazy=False, reading=True)
    return LanguageReader(build_language(analysis, request), end_of_turn=tuple(analysis.stop))


def read(family: str, text: str) -> dict:
    message = reader(family).parse(text)
    for seed in range(6):
        assert without_generated_ids(streamed_in_random_chunks(reader(family), text, seed)) == \
            without_generated_ids(message), seed
    runtime = FORMATS[family]().parser(tools=WEATHER_TOOLS).parse(text)
    assert without_generated_ids(message) == without_generated_ids(runtime)
    return message


def calls(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_text_after_the_calls_is_content(family: str) -> None:
    good, _ = CALLS[family]
    message = read(family, f"Let me look.\n{good}\nThat is all.")
    assert calls(message) == [("get_weather", {"city": "Paris", "days": 3})]
    assert message["content"] == "Let me look.\n\nThat is all."


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_a_call_to_an_unknown_tool_is_content_and_the_next_call_is_kept(family: str) -> None:
    good, unknown = CALLS[family]
    message = read(family, f"{unknown}\n{good}")
    assert calls(message) == [("get_weather", {"city": "Paris", "days": 3})]
    assert message["content"] == unknown


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_a_call_cut_off_keeps_its_complete_values(family: str) -> None:
    good, _ = CALLS[family]
    cut = good[:good.index("3")]  # inside the value of `days`
    message = read(family, cut)
    assert calls(message) == [("get_weather", {"city": "Paris"})]
    assert message["tool_calls"][0].get("incomplete") is True
    # the member the output stopped inside is content (`, "days": `), where the value cannot hold it
    assert cut.rstrip().endswith(message["content"] or "") and "Paris" not in (message["content"] or "")


@pytest.mark.parametrize("make", [analyses.qwen3, analyses.deepseek_v31, analyses.kimi_k2_thinking],
                         ids=["qwen3", "deepseek_v31", "kimi_k2_thinking"])
def test_a_lazy_language_reads_free_output_then_the_calls(make) -> None:  # type: ignore[no-untyped-def]
    """A lazy language (the grammar for `tool_choice: auto`): reasoning and content until a
    trigger, then the calls; read as the runtime reads it."""
    analysis = make()
    language = build_language(analysis, Request(tools=tuple(WEATHER_TOOLS), thinking=True))
    lazy = LanguageReader(language, end_of_turn=tuple(analysis.stop))
    text = analyses.render_output(analysis, reasoning="Think.", content="Hi.",
                                  calls=[("get_weather", {"city": "Paris"})], thinking=True)
    message = lazy.parse(text)
    assert (message["reasoning_content"], message["content"]) == ("Think.", "Hi.")
    assert calls(message) == [("get_weather", {"city": "Paris"})]
    # ids aside: where the format numbers its calls (`functions.get_weather:0`) the runtime passes
    # that id through, while the language has no capture for it and the reader draws one
    runtime = analysis.parser(tools=WEATHER_TOOLS, thinking=True).parse(text)
    assert (message["content"], message["reasoning_content"], calls(message)) == \
        (runtime["content"], runtime["reasoning_content"], calls(runtime))
    for seed in range(4):
        assert without_generated_ids(streamed_in_random_chunks(lazy, text, seed)) == without_generated_ids(message)


def test_a_nullable_string_written_as_null_is_null_in_any_chunking() -> None:
    """llama.cpp's expectation (Qwen3-Coder, `set_nullable_str`): `null` in a string-or-null
    parameter is null, also where the value streams as it arrives."""
    tool = {"type": "function", "function": {"name": "set_nullable_str", "parameters": {
        "type": "object", "properties": {"name": {"type": ["string", "null"]}}}}}
    analysis = analyses.qwen3_coder()
    language = build_language(analysis, Request(tools=(tool,), lazy=False, reading=True))
    text = "<tool_call>\n<function=set_nullable_str>\n<parameter=name>\nnull\n</parameter>\n</function>\n</tool_call>"
    whole = LanguageReader(language, end_of_turn=tuple(analysis.stop)).parse(text)
    assert calls(whole) == [("set_nullable_str", {"name": None})]
    for seed in range(6):
        stream = streamed_in_random_chunks(LanguageReader(language, end_of_turn=tuple(analysis.stop)), text, seed)
        assert without_generated_ids(stream) == without_generated_ids(whole), seed
    named = text.replace("null\n</parameter>", "nullable\n</parameter>")
    assert calls(LanguageReader(language, end_of_turn=tuple(analysis.stop)).parse(named)) == \
        [("set_nullable_str", {"name": "nullable"})]


@pytest.mark.parametrize("text", ["Hello<｜tool▁calls▁begin｜>oops",
                                  "Hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜> nothing",
                                  "<｜tool▁calls▁begin｜>\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>",
                                  "Hello<｜tool▁calls▁begin｜>oops</think>x"])
def test_a_call_section_that_holds_no_call_is_text_opener_included(text: str) -> None:
    """The section's opener is held with the text after it until a call begins: where none does,
    every character comes back as content, streamed or not; so does a reasoning end marker
    read again after it, as reasoning was over."""
    parser = analyses.deepseek_v31().parser(thinking=False)
    message = parser.parse(text)
    assert (message["content"], message["tool_calls"]) == (text, [])
    for seed in range(6):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == without_generated_ids(message)


def test_a_whole_call_before_text_and_a_broken_call_in_one_section_is_kept() -> None:
    """Text between two calls does not make the section empty: when the second call breaks,
    the first stays a call, whole or streamed."""
    text = ('A<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"q": 1}<｜tool▁call▁end｜>'
            "hmm<｜tool▁call▁begin｜>search<｜tool▁sep｜>garbage")
    parser = analyses.deepseek_v31().parser(thinking=False)
    message = parser.parse(text)
    assert calls(message) == [("search", {"q": 1})]
    assert message["content"] == "Ahmm<｜tool▁call▁begin｜>search<｜tool▁sep｜>garbage"
    for seed in range(6):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == without_generated_ids(message)


@pytest.mark.parametrize("text, reasoning, content", [
    ("<think><think>plan</think>Answer.", "<think>plan", "Answer."),
    ("<think><think><think>", "<think><think>", None),
    ("plan</think><think>Answer.", "planAnswer.", None),  # reasoning opened again (reasoning-in-answer)
])
def test_a_start_marker_repeated_after_the_prompt_opened_reasoning_loses_nothing(
        text: str, reasoning: str, content: str | None) -> None:
    """With thinking on, DeepSeek-V3.1's prompt opens `<think>`: one more that the model writes
    first is markup, and the ones after it are text, streamed or not."""
    parser = analyses.deepseek_v31().parser(thinking=True)
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"]) == (reasoning, content)
    for seed in range(6):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == without_generated_ids(message)


@pytest.mark.parametrize("markup_first", [True, False])
def test_a_marker_a_markup_rule_reads_wins_over_the_text_that_could_hold_it(markup_first: bool) -> None:
    """Two complete readings alike in calls, one reading the last marker as text and one as markup
    (an `ir.MARKUP` rule): the markup reading wins, whichever the language lists first; before
    the end only the text reading is left."""
    text_only = ir.Capture(ir.CONTENT, ir.Text(()))
    marked = ir.seq(ir.Capture(ir.CONTENT, ir.Text(("</x>",))), ir.Rule("again", ir.Lit("</x>"), ir.MARKUP))
    language = ir.Language(ir.choice(*((marked, text_only) if markup_first else (text_only, marked))))
    for text, content in (("Answer.</x>", "Answer."), ("Use </x> here.", "Use </x> here.")):
        message = LanguageReader(language).parse(text)
        assert message["content"] == content
        for seed in range(6):
            assert streamed_in_random_chunks(LanguageReader(language), text, seed) == message, seed


@pytest.mark.parametrize("thinking", [None, True, False])
def test_a_broken_call_after_a_whole_one_in_unclosed_reasoning(thinking: bool | None) -> None:
    """DeepSeek-R1 may end its reasoning at the calls without `</think>`: one reading takes the
    whole output as reasoning waiting for `</think>`, another reads the calls. When the second
    call breaks, the first reading goes on alone and fails at the end; recovery goes on from the
    reading that read the whole call, so what the first reading read meanwhile is not emitted:
    nothing is read twice, and a stream gives what a whole read gives."""
    analysis = analyses.deepseek_r1()
    request = Request(tools=tuple(WEATHER_TOOLS), thinking=thinking, lazy=False, reading=True,
                      end_tokens=(analysis.eos_token,))
    reader = LanguageReader(build_language(analysis, request), end_of_turn=tuple(analysis.stop))
    broken = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{bad json\n```<｜tool▁call▁end｜>"
    text = ("Sure. <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            f"```json\n{{\"city\": \"Boston\"}}\n```<｜tool▁call▁end｜>{broken}<｜tool▁calls▁end｜>")
    message = reader.parse(text)
    assert calls(message) == [("get_weather", {"city": "Boston"})]
    assert (message["reasoning_content"], message["content"]) == ("Sure.", broken)
    for seed in range(6):
        assert without_generated_ids(streamed_in_random_chunks(reader, text, seed)) == \
            without_generated_ids(message), seed


def test_a_call_cut_off_before_its_arguments_start_is_text() -> None:
    """An output cut off inside the first argument's marker (`<p` of `<parameter=`) of a call
    after a whole one: the second call's arguments never started, so it is text, read whole or
    streamed (a reading that closed its arguments empty, failing there earlier, is not preferred
    to the one still inside them)."""
    good, _ = CALLS["qwen3_coder"]
    second = "<tool_call>\n<function=get_weather>\n<p"
    message = read("qwen3_coder", f"Some text.{good}\n{second}")
    assert calls(message) == [("get_weather", {"city": "Paris", "days": 3})]
    assert message["content"] == f"Some text.\n{second}"


_V31_CALL = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
_LONG_KEY = "location_" * 2000
_BLANK = " \n" * 6000


@pytest.mark.parametrize(("thinking", "text", "content", "arguments"), [
    (True, "</think>" + _BLANK + "Hello", "Hello", []),
    (True, "</think>" + _BLANK + _V31_CALL + '{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>', None,
     [{"location": "Paris"}]),
    (False, "<｜tool▁calls▁begin｜>" + _BLANK + "oops", "<｜tool▁calls▁begin｜>" + _BLANK + "oops", []),
    (False, _V31_CALL + _BLANK + "oops", _V31_CALL + _BLANK + "oops", []),
    (False, _V31_CALL + '{"' + _LONG_KEY + '": 1, oops', ", oops", [{_LONG_KEY: 1}]),
    (False, _V31_CALL + '{"' + _LONG_KEY + '": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>', None,
     [{_LONG_KEY: "Paris"}]),
    (False, _V31_CALL + "{" + _BLANK + '"location": "P",' + _BLANK + '"days": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     None, [{"location": "P", "days": 3}]),
    (False, _V31_CALL + '{"location": "P",' + _BLANK + "oops", "," + _BLANK + "oops", [{"location": "P"}]),
    (False, "Hello<｜end▁of▁sentence｜>" + _BLANK + "more", "Hello" + _BLANK + "more", []),
    (False, "Hello<｜end▁of▁sentence｜>" + _BLANK, "Hello", []),
])
def test_long_held_text_comes_back_whole(thinking: bool, text: str, content: str | None, arguments: list) -> None:
    """Text held for longer than the reader keeps in its buffer (a long key, long whitespace
    after a marker) is set aside and put back where recovery needs it: nothing is lost, and
    streams in small chunks agree with the whole parse."""
    parser = analyses.deepseek_v31().parser(thinking=thinking)
    message = parser.parse(text)
    assert message["content"] == content
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == arguments
    for seed in range(3):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == without_generated_ids(message)


@pytest.mark.parametrize("arguments", ["0", "[1]", "true", "null"])
def test_arguments_that_are_no_object_make_no_call(arguments: str) -> None:
    """A call's arguments are a JSON object; any other value leaves the call as text."""
    text = f'<tool_call>{{"name": "get_weather", "arguments": {arguments}}}</tool_call>'
    for tools in (None, WEATHER_TOOLS):
        message = analyses.hermes().parser(tools=tools).parse(text)
        assert (message["content"], message["tool_calls"]) == (text, [])


def test_bare_json_calls_go_out_as_each_is_read_whole() -> None:
    """Bare JSON calls (Llama 3.x) may be text, so each is held until it is read whole; then it
    goes out, not at the end of the output (the reading of every call as text is dropped)."""
    call = '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'
    stream = analyses.llama31().parser(tools=WEATHER_TOOLS).stream()
    first = stream.feed(call + "\n")
    assert [d["tool_calls"][0]["function"].get("name") for d in first if "tool_calls" in d][:1] == ["get_weather"]
    second = stream.feed(call)
    assert any(d["tool_calls"][0]["index"] == 1 for d in second if "tool_calls" in d)
    stream.finish()
    assert [c["function"]["arguments"] for c in stream.message()["tool_calls"]] == \
        ['{"city": "Paris", "days": 3}'] * 2


@pytest.mark.parametrize("family", ["llama31", "deepseek_v31", "qwen3_coder"])
def test_a_parser_keeps_nothing_of_the_outputs_it_read(family: str) -> None:
    """A parser serves many requests (the server keeps one per tool set): reading an output
    leaves nothing behind in it, however long the output."""
    parser = analyses.FAMILIES[family]().parser(tools=WEATHER_TOOLS)
    parser.parse("Some text {x} " * 50)
    kept = len(parser._reader.firsts._cache)
    for _ in range(3):
        parser.parse("Some text {x} " * 500)
        streamed_in_random_chunks(parser, "Some text {x} " * 200, 0)
    assert len(parser._reader.firsts._cache) == kept


@pytest.mark.parametrize("between", ["", "\n"])
def test_a_reasoning_block_after_a_whole_call_is_text_marker_included(between: str) -> None:
    """Reasoning reopened after the calls is reasoning (`reasoning-in-answer`), its markers
    markup. (It was text, start marker included, the reading that failed there having read past
    the call, not inside its closing.)"""
    call = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
    text = "<think>Plan.</think>" + call + between + "<think>Again.</think>"
    parser = analyses.glm45().parser(tools=WEATHER_TOOLS, thinking=True)
    message = parser.parse(text)
    assert (message["reasoning_content"], message["content"]) == ("Plan.Again.", None)
    assert calls(message) == [("get_weather", {"city": "Paris"})]
    for seed in range(4):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == without_generated_ids(message)


@pytest.mark.parametrize("value", ["{blank}Paris", "{blank}<![CDATA[Paris]]>", "Paris,{blank}France"])
def test_long_whitespace_in_a_tagged_value_pins_no_text(value: str) -> None:
    """Whitespace before a tagged value (which may still open a CDATA section), or inside it
    (whose end may be the end marker's leading newline), is read as it comes, not kept in the
    reader's buffer: the buffer stays small and nothing is lost."""
    blank = " \n" * 6000
    value = value.format(blank=blank)
    text = (f"<tool_call>\n<function=get_weather>\n<parameter=city>{value}\n</parameter>\n"
            f"<parameter=days>{blank}3\n</parameter>\n</function>\n</tool_call>")
    parser = analyses.qwen3_coder().parser(tools=WEATHER_TOOLS)
    message = parser.parse(text)
    arguments = json.loads(message["tool_calls"][0]["function"]["arguments"])
    assert "Paris" in arguments["city"] and arguments["days"] == 3
    stream, peak = parser.stream(), 0
    for at in range(0, len(text), 16):
        stream.feed(text[at:at + 16])
        peak = max(peak, len(stream.buf))
    stream.finish()
    assert without_generated_ids(stream.message()) == without_generated_ids(message)
    assert peak <= 8192


_REPEATED = {
    # call openers with no call after them, the first read as an end of turn by one reading
    "GigaChat3-10B-A1.8B.jinja": (None, "<|message_sep|>\n\nfunction call<|role_sep|>\n" * 2),
    # a reasoning block reopened after each call
    "GLM-4.6.jinja": (True, ("\n<think>I should call a tool.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>"
                             "\n<arg_value>Paris</arg_value>\n</tool_call>\n") * 3),
}


_KEPT = {"GigaChat3-10B-A1.8B.jinja": ("content", "<|message_sep|>\n\nfunction call<|role_sep|>", 2),
         "GLM-4.6.jinja": ("reasoning_content", "I should call a tool.", 3)}  # reasoning-in-answer


@pytest.mark.parametrize("name", sorted(_REPEATED))
def test_repeated_parts_stream_as_they_read_whole(name: str) -> None:
    """Outputs where readings fail at one place in an order that depends on the chunks (whole,
    every reading reads the piece; streamed, each stops at the chunk's end): recovery picks the
    same one, so every chunking gives the whole parse's message."""
    path = next((p for p in corpora.all_templates() if p.name == name), None)
    if path is None:
        pytest.skip(f"{name} is not in the corpora")
    thinking, text = _REPEATED[name]
    parser = autoparser.analyze(path.read_text(encoding="utf-8")).parser(tools=WEATHER_TOOLS, thinking=thinking)
    message = without_generated_ids(parser.parse(text))
    role, kept, times = _KEPT[name]
    assert message[role].count(kept) == times  # no marker that is text is lost, no part
    for size in range(1, 10):
        stream = parser.stream()
        for at in range(0, len(text), size):
            stream.feed(text[at:at + size])
        stream.finish()
        assert without_generated_ids(stream.message()) == message, size


def test_a_bare_name_that_may_be_a_call_without_arguments_stays_undecided() -> None:
    """A reading that read a call whole displaces the one reading the same text as content only
    where the call has arguments: a bare name (a call with no arguments in a format whose calls
    are a name and optional tagged arguments) may as well be text, and the end of turn decides."""
    parser = analyses.glm4_tool_only().parser(tool_call_policy="lenient")
    text = "get_weather00 <|user|><|user|><|user|>"
    message = parser.parse(text)
    assert (message["content"], message["tool_calls"]) == ("get_weather00", [])
    for cut in range(len(text) + 1):
        assert without_generated_ids(streamed_in_two(parser, text, cut)) == without_generated_ids(message), cut


def test_a_call_read_whole_inside_a_block_leaves_the_text_reading_be() -> None:
    """Outside bare JSON, a reading past a whole call may still fail where the reading of the
    same text as content goes on (Python calls in a fenced block, cut off): the text reading is
    kept, as the whole parse keeps it, in every chunking (a case an unseeded property run found)."""
    analysis = analyses.minicpm3_kwargs()
    written = [("get_weather", {}), ("get_weather", {"city": "", "note": "", "days": 0, "options": {}})]
    text = analyses.render_output(analysis, "some thought", "Some text.", written, stop=False)[:105]
    parser = analysis.parser(tools=PROPERTY_TOOLS)
    message = without_generated_ids(parser.parse(text))
    for cut in range(0, len(text), 4):
        for second in (cut + 20, cut + 7):
            stream = parser.stream()
            for piece in (text[:cut], text[cut:second], text[second:]):
                stream.feed(piece)
            stream.finish()
            assert without_generated_ids(stream.message()) == message, (cut, second)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("ending", ["", "\\"])
def test_escapes_cut_by_chunks_stream_as_the_whole_reads_them(size: int, ending: str) -> None:
    """A chunk that ends inside an escape of a streamed JSON string (`\\` then `"` in the next
    chunk) holds its backslash until the next chunk, which may stream on at once; a backslash
    the output ends with is a literal one, as in the whole parse."""
    code = 'if (a["k"] > 1) { s = "q\\\\n\\u00e9"; }\n' * 3
    arguments = json.dumps({"path": "a.js", "content": code})[:-2] + ending
    text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>" + arguments
    parser = analyses.deepseek_v31().parser()
    whole = parser.parse(text)
    stream = parser.stream()
    deltas = [d for at in range(0, len(text), size) for d in stream.feed(text[at:at + size])]
    deltas += stream.finish()
    assert without_generated_ids(stream.message()) == without_generated_ids(whole)
    streamed = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if "tool_calls" in d)
    assert streamed == whole["tool_calls"][0]["function"]["arguments"]
    assert json.loads(streamed)["content"].startswith(code[:-2])


def test_a_bracket_opens_a_bare_json_call_only_before_a_key() -> None:
    """Where calls are bare JSON, a `{` that no quote follows (code, `{x}`, a run of braces)
    is text at once, not a call to try: the language says so with a weak bracket."""
    analysis = analyses.llama31()
    language = build_language(analysis, Request(tools=tuple(WEATHER_TOOLS), reading=True, lazy=False))
    assert "('{' only before '\"')" in str(language) and "<content: '{'>" not in str(language)
    call = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    text = "if (a) { b({x}); } {{{{ " + call + " {} {"
    parser = analysis.parser(tools=WEATHER_TOOLS)
    message = parser.parse(text)
    assert message["content"] == "if (a) { b({x}); } {{{{  {} {"
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"city": "Paris"}']
    for seed in range(5):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == without_generated_ids(message)


@pytest.mark.parametrize("family", ["kimi_k2", "hermes", "llama31", "llama32_pythonic", "deepseek_v32"])
def test_a_place_a_call_may_begin_again_is_found_at_a_string_end_as_by_a_search_of_the_whole(family: str) -> None:
    """Where a streamed string's chunk ends with what may yet be a place where a call begins
    again, the reader looks for it in the chunk's last characters only; it finds what a search of
    the whole chunk finds (whitespace runs inside a marker up to their bound included)."""
    analysis = getattr(analyses, family)()
    language = build_language(analysis, Request(tools=tuple(WEATHER_TOOLS), lazy=False, reading=True))
    stream = LanguageReader(language, end_of_turn=tuple(analysis.stop)).stream()
    pattern = stream.reader.resync_begun
    for marker in language.resync:
        for spaced in (marker, marker.replace(" ", " " * 64), marker.replace(" ", "\n" * 65)):
            for cut in range(len(spaced) + 1):
                for before in ("", "x" * 300, marker * 3, spaced[:cut] * 2 + "y"):
                    text = before + spaced[:cut]
                    found, whole = stream._resync_end(text), pattern.search(text)
                    assert (found and found.start()) == (whole and whole.start()), (text[-80:], found, whole)
