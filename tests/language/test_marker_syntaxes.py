"""Marker syntaxes no real model uses, and reasoning that only the prompt or a content block shows.

Each fixture family in `fixtures/templates/` writes its reasoning, calls and end of turn in its
own bracket, punctuation or word style; the analysis must find them without knowing the style.
The full probe round trip over every fixture is in `test_roundtrip.py`.
"""

from __future__ import annotations

import pytest
from test_analyze_fixtures import analyze_fixture

from autoparser.analyzers.diff import is_marker, segments
from autoparser.analyzers.reasoning import closing_counterpart, opening_counterpart

FAMILIES = {
    # fixture: (reasoning start, reasoning end, end of turn, tool format)
    "guillemet_json.jinja": ("«think»", "«/think»", "«over»", "json"),
    "double_at_tags.jinja": ("@@ponder@@", "@@/ponder@@", "@@done@@", "tag_json"),
    "paren_python_calls.jinja": ("((muse))", "((/muse))", "((fin))", "tag_tagged"),
    "caps_words.jinja": ("THOUGHT_BEGIN", "THOUGHT_END", "TURN_OVER", "tag_json"),
    "dollar_params.jinja": ("$$reflect$$", "$$/reflect$$", "$$eot$$", "tag_tagged"),
    "tilde_channels.jinja": ("~~think~~", "~~/think~~", "~~stop~~", "json"),
    "colon_messages.jinja": ("for=notes::say::", "::next::::turn:: bot", "::done::", "tag_json"),
    "compound_brackets.jinja": ("⟦open⟧muse⟦go⟧", "⟦shut⟧muse⟦go⟧", "⟦eot⟧", "tag_json"),
    "nested_brackets.jinja": ("||think||", "||/think||", "||end||", "tag_tagged"),
    "section_quotes.jinja": ("%%muse%%", "%%/muse%%", "%%eot%%", "tag_tagged"),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_read_without_knowing_its_style(name: str) -> None:
    start, end, turn_end, tool_format = FAMILIES[name]
    a = analyze_fixture(name)
    assert (a.reasoning.start, a.reasoning.end) == (start, end)
    assert a.stop[0] == turn_end
    assert a.tools.supported and a.tools.format == tool_format
    assert not a.warnings


def test_families_parse_their_own_output() -> None:
    a = analyze_fixture("double_at_tags.jinja")
    m = a.parser().parse('@@ponder@@hmm@@/ponder@@Sure.@@fn@@probe@@args@@{"q": 1}@@/fn@@')
    assert (m["reasoning_content"], m["content"]) == ("hmm", "Sure.")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]] == [("probe", '{"q": 1}')]


@pytest.mark.parametrize("text, markers", [
    ("@@call@@x@@/call@@", ["@@call@@", "@@/call@@"]),
    ("((think))hi((/think))", ["((think))", "((/think))"]),
    ("«think»a«/think»", ["«think»", "«/think»"]),
    ("$$invoke:f$$", ["$$invoke:f$$"]),
    ("BEGIN_THOUGHT x END_THOUGHT", ["BEGIN_THOUGHT", "END_THOUGHT"]),
    ("[BEGIN FINAL RESPONSE]", ["[BEGIN FINAL RESPONSE]"]),
    # JSON, Python calls, Markdown and namespaces stay punctuation
    ('{"name": "f", "x": [[1, 2]]}', []),
    ("f(x=1) and **bold** and functions::get_weather({", []),
])
def test_segmenter_markers(text: str, markers: list[str]) -> None:
    assert [s for s in segments(text) if is_marker(s)] == markers
    assert "".join(segments(text)) == text


def test_closing_counterparts_follow_the_opening_syntax() -> None:
    assert closing_counterpart("((muse))")[0] == "((/muse))"
    assert closing_counterpart("«think»")[0] == "«/think»"
    assert "</think>" in closing_counterpart("<think>")
    assert "<|END_THINKING|>" in closing_counterpart("<|START_THINKING|>")
    assert opening_counterpart("$$/reflect$$", []) == "$$reflect$$"


def test_switch_that_opens_reasoning_in_the_prompt() -> None:
    a = analyze_fixture("dollar_params.jinja")
    r = a.reasoning
    assert (r.toggle, r.forced_open, r.default_on) == ("reflect", True, False)
    m = a.parser(thinking=True).parse("plan$$/reflect$$Done.")
    assert (m["reasoning_content"], m["content"]) == ("plan", "Done.")
    assert a.parser(thinking=False).parse("Done.")["content"] == "Done."


def test_reasoning_shown_only_as_a_typed_content_block() -> None:
    a = analyze_fixture("tilde_channels.jinja")
    assert a.reasoning.rendered_in_history and not a.reasoning.forced_open
    m = a.parser().parse("~~think~~plan~~/think~~Answer.")
    assert (m["reasoning_content"], m["content"]) == ("plan", "Answer.")


SYSTEM_TEXT_SWITCH = """{%- for message in messages -%}
<|turn|>{{ message.role }}
{%- if loop.first and deliberate %} Think first, between <ponder></ponder>, then answer.{% endif %}
{{ message.content }}<|done|>
{% endfor -%}
{%- if add_generation_prompt %}<|turn|>assistant
{% endif -%}"""

PROMPT_OPENS_TEXT = """{%- for message in messages -%}
<|turn|>{{ message.role }}
{% if message.role == 'assistant' and message.reasoning_content and loop.last -%}
{{ message.reasoning_content }}
--- ANSWER ---
{% endif -%}
{{ message.content }}<|done|>
{% endfor -%}
{%- if add_generation_prompt %}<|turn|>assistant
Let me reason first:
{% endif -%}"""

PAST_TURNS_CUT = """{%- for message in messages -%}
<|turn|>{{ message.role }}
{% if message.role == 'assistant' and not loop.last and '</ponder>' in message.content -%}
{{ message.content.split('</ponder>')[-1] }}
{%- else %}{{ message.content }}{% endif %}<|done|>
{% endfor -%}
{%- if add_generation_prompt %}<|turn|>assistant
<ponder>
{% endif -%}"""


def test_switch_that_only_changes_the_instructions() -> None:
    import autoparser

    r = autoparser.analyze(SYSTEM_TEXT_SWITCH).reasoning
    assert (r.mode, r.start, r.end, r.toggle, r.default_on, r.forced_open) == (
        "tagged", "<ponder>", "</ponder>", "deliberate", False, False)


def test_plain_text_that_the_prompt_ends_with_opens_reasoning() -> None:
    import autoparser

    a = autoparser.analyze(PROMPT_OPENS_TEXT.replace("--- ANSWER ---", "[FINAL ANSWER]"))
    assert (a.reasoning.start, a.reasoning.end, a.reasoning.forced_open) == (
        "Let me reason first:", "[FINAL ANSWER]", True)
    m = a.parser().parse("plan\n[FINAL ANSWER]\nDone.")
    assert (m["reasoning_content"], m["content"]) == ("plan", "Done.")


def test_end_marker_cut_from_past_turns_only() -> None:
    import autoparser

    r = autoparser.analyze(PAST_TURNS_CUT).reasoning
    assert (r.start, r.end, r.forced_open) == ("<ponder>", "</ponder>", True)


NUMBERED_CALLS = """{%- for message in messages -%}
<|turn|>{{ message.role }}
{% if message.tool_calls %}<|calls|>{% for call in message.tool_calls %}<|call|>{{ call.function.name }}#{{ loop.index0 + FIRST }}~v2~{{ call.function.arguments | tojson }}<|/call|>{% endfor %}<|/calls|>
{%- else %}{{ message.content }}{% endif %}<|done|>
{% endfor -%}
{%- if add_generation_prompt %}<|turn|>assistant
{% endif -%}"""


@pytest.mark.parametrize("first", [0, 1])
def test_call_index_confirmed_by_two_calls(first: int) -> None:
    import autoparser

    a = autoparser.analyze(NUMBERED_CALLS.replace("FIRST", str(first)))
    # the counting number is the index; the constant `2` of `~v2~` is part of the marker
    assert (a.tools.name_end, a.tools.call_index, a.tools.call_index_base) == (
        f"#{first}~v2~", "#{index}~v2~", first)
    m = a.parser().parse('<|calls|><|call|>f#5~v2~{"x": 1}<|/call|><|/calls|>')
    assert [c["function"]["name"] for c in m["tool_calls"]] == ["f"]


def test_constant_number_in_a_marker_is_not_an_index() -> None:
    import autoparser

    a = autoparser.analyze(NUMBERED_CALLS.replace("{{ loop.index0 + FIRST }}", "7"))
    assert (a.tools.name_end, a.tools.call_index) == ("#7~v2~", "")


TOOLS_BESIDE_SYSTEM = """{%- for message in messages -%}
<|turn|>{{ message.role }}
{% if message.role == 'system' %}{{ message.content }}{% if tools %} Tools: {{ tools | tojson }}{% endif %}
{%- elif message.tool_calls %}{% for call in message.tool_calls %}<|call|>{{ {"name": call.function.name, "arguments": call.function.arguments} | tojson }}<|/call|>{% endfor %}
{%- else %}{{ message.content }}{% endif %}<|done|>
{% endfor -%}
{%- if add_generation_prompt %}<|turn|>assistant
{% endif -%}"""


def test_tools_listed_only_beside_a_system_message_are_shown() -> None:
    import autoparser

    a = autoparser.analyze(TOOLS_BESIDE_SYSTEM)
    assert a.tools.supported and a.tools.format == "json"
    assert not [w for w in a.warnings if "tool definitions" in w]


PERCENT_S_QUOTES = """{%- for message in messages -%}
<|turn|>{{ message.role }}
{% if message.tool_calls %}[{% for call in message.tool_calls %}{{ call.function.name }}(
{%- for key, value in call.function.arguments.items() %}
{%- if value is string %}{{ '%s="%s"' % (key, value) }}{% else %}{{ '%s=%s' % (key, value) }}{% endif %}
{%- if not loop.last %}, {% endif %}{% endfor %}){% if not loop.last %}, {% endif %}{% endfor %}]
{%- else %}{{ message.content }}{% endif %}<|done|>
{% endfor -%}
{%- if add_generation_prompt %}<|turn|>assistant
{% endif -%}"""


def test_quote_written_by_the_template_belongs_to_the_value() -> None:
    import autoparser
    from autoparser.roundtrip import probe_messages, run_case

    a = autoparser.analyze(PERCENT_S_QUOTES)
    assert (a.tools.arg_key_end, a.tools.arg_string_raw) == ("=", False)
    for case, message in probe_messages().items():
        result = run_case(a, case, message)
        assert result.status == "pass", (case, result.cause, result.got)
