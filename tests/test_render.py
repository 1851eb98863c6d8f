"""The renderer: transformers' chat-template behaviour, kinder tool arguments, and a hard sandbox."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoparser.render import (
    DEFAULT_LIMITS,
    RenderLimitExceeded,
    RenderLimits,
    SandboxViolation,
    TemplateCompileError,
    TemplateRaisedError,
    TemplateRenderError,
    compile_template,
    render_template,
)
from autoparser.render_messages import JsonArguments, prepare_messages

USER = [{"role": "user", "content": "hi"}]
FAST = RenderLimits(seconds=0.3, max_chars=100_000)


def render(source: str, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    return render_template(source, USER if messages is None else messages, **kwargs)


def call_message(arguments: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}]


ARGS_TEMPLATE = "{% set a = messages[0].tool_calls[0].function.arguments %}"


def render_args(expression: str, arguments: Any) -> str:
    return render(ARGS_TEMPLATE + expression, call_message(arguments))


# -- transformers' environment ----------------------------------------------------------------


def test_trim_and_lstrip_blocks() -> None:
    source = "{% for m in messages %}\n    {% if true %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n"
    assert render(source) == "[hi]\n"


def test_standard_variables() -> None:
    source = "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}|{{ custom }}"
    assert render(source, bos_token="<s>", eos_token="</s>", add_generation_prompt=True,
                  custom="x") == "<s>|</s>|True|None|None|x"


def test_documents_can_be_passed() -> None:
    assert render("{{ documents[0].title }}", documents=[{"title": "T", "text": "x"}]) == "T"


def test_generation_tag_renders_its_body() -> None:
    source = "{% for m in messages %}{% generation %}<{{ m.content }}>{% endgeneration %}{% endfor %}"
    assert render(source) == "<hi>"


def test_loopcontrols() -> None:
    source = "{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    assert render(source) == "023"


def test_tojson_keeps_unicode_and_html() -> None:
    assert render("{{ {'t': 'é <b>&'} | tojson }}") == '{"t": "é <b>&"}'


def test_tojson_options() -> None:
    value = "{'b': [1, 2], 'a': 'x'}"
    assert render("{{ " + value + " | tojson(indent=2) }}") == json.dumps({"b": [1, 2], "a": "x"}, indent=2)
    assert render("{{ " + value + " | tojson(separators=(',', ':')) }}") == '{"b":[1,2],"a":"x"}'
    assert render("{{ " + value + " | tojson(sort_keys=True) }}") == '{"a": "x", "b": [1, 2]}'
    assert render("{{ 'é' | tojson(ensure_ascii=True) }}") == '"\\u00e9"'


def test_tojson_accepts_map_results_views_and_ranges() -> None:
    assert render("{{ messages | map(attribute='role') | tojson }}") == '["user"]'
    assert render("{{ {'a': 1}.keys() | tojson }}") == '["a"]'
    assert render("{{ {'x': messages | map(attribute='content')} | tojson }}") == '{"x": ["hi"]}'
    assert render("{{ range(3) | tojson }}") == "[0, 1, 2]"


def test_tojson_of_undefined_is_a_clear_error() -> None:
    with pytest.raises(TemplateRaisedError, match="not JSON serializable"):
        render("{{ nothing | tojson }}")


def test_strftime_now() -> None:
    assert render("{{ strftime_now('%Y-%m-%d') }}") == datetime.now().strftime("%Y-%m-%d")


def test_raise_exception_message_reaches_the_caller() -> None:
    source = "{% if messages[0].role != 'system' %}{{ raise_exception('System message must come first') }}{% endif %}"
    with pytest.raises(TemplateRaisedError) as info:
        render(source)
    assert str(info.value) == "template raised an error at line 1: System message must come first"


def test_dict_global_builds_dicts_only() -> None:
    assert render("{{ dict(a=1)['a'] }}{{ dict.fromkeys(['k'], 2)['k'] }}") == "12"
    with pytest.raises(SandboxViolation):
        render("{{ dict.__class__ }}")


def test_namespace_refuses_private_names() -> None:
    assert render("{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}") == "2"
    with pytest.raises(SandboxViolation, match="underscore"):
        render("{% set ns = namespace(_x=1) %}")
    with pytest.raises(SandboxViolation, match="underscore"):
        render("{% set ns = namespace() %}{% set ns._x = 1 %}")


def test_message_keys_set_to_none_are_dropped() -> None:
    messages = [{"role": "assistant", "content": None, "tool_calls": None}]
    assert render("{{ messages[0].content is defined }}/{{ 'tool_calls' in messages[0] }}", messages) == "False/False"


@pytest.mark.parametrize("field", ["reasoning_content", "thinking", "reasoning"])
def test_reasoning_is_visible_under_both_names(field: str) -> None:
    messages = [{"role": "assistant", "content": "c", field: "why"}]
    assert render("{{ messages[0].reasoning_content }}|{{ messages[0].thinking }}", messages) == "why|why"


def test_caller_messages_are_not_modified() -> None:
    messages = call_message({"x": 1}) + [{"role": "user", "content": None}]
    snapshot = json.dumps(messages)
    prepare_messages(messages)
    render("{{ messages | length }}", messages)
    assert json.dumps(messages) == snapshot


# -- tool-call arguments ----------------------------------------------------------------------

ARGS = {"city": "Paris", "days": 2}
ARGS_JSON = json.dumps(ARGS, ensure_ascii=False)


@pytest.mark.parametrize("arguments", [ARGS, ARGS_JSON], ids=["dict", "json-text"])
@pytest.mark.parametrize(("expression", "expected"), [
    ("{{ a }}", ARGS_JSON),
    ("{{ 'x' + a }}", "x" + ARGS_JSON),
    ("{{ a + 'x' }}", ARGS_JSON + "x"),
    ("{{ a ~ '' }}", ARGS_JSON),
    ("{{ a | string }}", ARGS_JSON),
    ("{{ a | tojson }}", ARGS_JSON),
    ("{{ a | tojson(separators=(',', ':')) }}", '{"city":"Paris","days":2}'),
    ("{% for k, v in a.items() %}{{ k }}={{ v }};{% endfor %}", "city=Paris;days=2;"),
    ("{% for k, v in a | items %}{{ k }};{% endfor %}", "city;days;"),
    ("{{ a is mapping }}/{{ a is string }}", "True/False"),
    ("{{ a['city'] }}{{ a.days }}", "Paris2"),
    ("{% if a is string %}{{ a }}{% else %}{{ a | tojson }}{% endif %}", ARGS_JSON),
])
def test_arguments_print_as_json_dict_or_text(arguments: Any, expression: str, expected: str) -> None:
    assert render_args(expression, arguments) == expected


def test_arguments_given_as_text_keep_their_exact_text() -> None:
    compact = '{"city":"Paris"}'
    assert render_args("{{ a }}", compact) == compact
    assert render_args("{{ a | tojson }}", compact) == '{"city": "Paris"}'


@pytest.mark.parametrize("arguments", ["not json", "[1, 2]", 42], ids=["text", "array", "number"])
def test_arguments_that_are_not_an_object_stay_as_given(arguments: Any) -> None:
    assert render_args("{{ a }}", arguments) == str(arguments)


def test_arguments_beside_function_are_wrapped_too() -> None:
    messages = [{"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"k": "v"}}]}]
    assert render("{{ messages[0].tool_calls[0].arguments }}", messages) == '{"k": "v"}'


def test_arguments_stay_immutable() -> None:
    with pytest.raises(SandboxViolation):
        render_args("{{ a.update({'x': 1}) }}", ARGS)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6), max_size=4))
def test_printed_arguments_are_always_the_json_of_the_object(arguments: dict[str, Any]) -> None:
    for given_as in (arguments, json.dumps(arguments)):
        assert json.loads(render_args("{{ a }}", given_as)) == arguments
        assert json.loads(render_args("{{ a | tojson }}", given_as)) == arguments
    assert str(JsonArguments(arguments)) == json.dumps(arguments, ensure_ascii=False)


# -- sandbox ----------------------------------------------------------------------------------


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__['os'] }}",
    "{{ lipsum.__globals__ }}",
    "{{ namespace.__init__ }}",
    "{{ self.__dict__ }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{{ messages | attr('__class__') }}",
    "{{ '{0.__class__}'.format(messages) }}",
    "{{ messages['__class__'] }}",
    "{{ messages.append(1) }}",
    "{{ messages[0].clear() }}",
    "{{ range.__code__ }}",
    "{{ strftime_now.__globals__ }}",
])
def test_sandbox_escapes_raise(source: str) -> None:
    with pytest.raises(SandboxViolation, match="^template tried to escape the sandbox"):
        render(source)


def test_sandbox_violation_is_a_render_error_with_one_line() -> None:
    with pytest.raises(TemplateRenderError) as info:
        render("{{ ''.__class__ }}")
    assert "\n" not in str(info.value) and "'__class__'" in str(info.value)


# -- time and size bounds ---------------------------------------------------------------------


def assert_stops_quickly(source: str, limits: RenderLimits = FAST, match: str = "longer than") -> None:
    started = time.perf_counter()
    with pytest.raises(RenderLimitExceeded, match=match):
        render(source, render_limits=limits)
    assert time.perf_counter() - started < limits.seconds + 1.0


NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def test_nested_loops_stop_at_the_deadline() -> None:
    assert_stops_quickly(NESTED_LOOPS)


def test_loop_with_filter_and_recursive_loop_stop() -> None:
    assert_stops_quickly("{% for i in range(100000) %}{% for j in range(100000) if j < 0 %}{% endfor %}{% endfor %}")
    assert_stops_quickly("{% for i in range(100000) if (range(100000) | select('<', 0) | list) %}{% endfor %}")
    assert render("{% for i in range(5) if i is odd %}{{ i }}{% endfor %}") == "13"
    assert_stops_quickly("{% set t = [[[1]]] %}{% for i in range(100000) %}{% for x in t recursive %}"
                         "{{ loop(x) if x is iterable else '' }}{% endfor %}{% endfor %}", match="longer than|output")


def test_exponential_macro_stops_at_the_deadline() -> None:
    assert_stops_quickly("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}")


def test_unbounded_recursion_is_reported() -> None:
    assert_stops_quickly("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", match="recursed too deeply")


def test_call_block_recursion_is_reported() -> None:
    source = "{% macro f() %}{% call g() %}x{% endcall %}{% endmacro %}{% macro g() %}{{ caller() }}{{ f() }}{% endmacro %}{{ f() }}"
    assert_stops_quickly(source, match="recursed too deeply|longer than")


def test_default_time_limit_is_about_two_seconds() -> None:
    assert DEFAULT_LIMITS.seconds == 2.0
    assert DEFAULT_LIMITS.max_chars >= 1_000_000


def test_deadline_works_in_worker_threads() -> None:
    errors: list[BaseException] = []

    def worker(source: str) -> None:
        try:
            render(source, render_limits=FAST)
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    recursion = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    threads = [threading.Thread(target=worker, args=(source,)) for source in (NESTED_LOOPS, recursion)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert time.perf_counter() - started < 3
    assert len(errors) == 2 and all(isinstance(e, RenderLimitExceeded) for e in errors)


def test_limits_do_not_leak_between_renders() -> None:
    with pytest.raises(RenderLimitExceeded):
        render(NESTED_LOOPS, render_limits=FAST)
    assert render("{% for i in range(1000) %}x{% endfor %}") == "x" * 1000


@pytest.mark.parametrize("source", [
    "{% for i in range(100000) %}{% for j in range(1000) %}xxxxxxxxxx{% endfor %}{% endfor %}",
    "{{ 'a' * 10000000000 }}",
    "{{ ['a'] * 10000000000 }}",
    "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson }}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | string }}",
    "{% macro m(n) %}{% for i in range(n) %}xxxxxxxxxx{% endfor %}{% endmacro %}{% set s = m(100000) %}",
    "{% set s %}{% for i in range(100000) %}xxxxxxxxxx{% endfor %}{% endset %}",
    "{{ 'x'.ljust(10000000000) }}",
    "{{ 'x' | center(10000000000) }}",
    "{{ 'x' | indent(10000000000) }}",
    "{{ '%10000000000d' % 1 }}",
    "{{ '{:>10000000000}'.format(1) }}",
    "{% set s = 'x' * 50000 %}{{ s.replace('x', s) }}",
    "{% set s = 'x' * 50000 %}{{ s | replace('x', s) }}",
    "{% set s = 'x' * 50000 %}{{ ([s] * 1000) | join }}",
    "{% set ns = namespace(l=['x' * 50000]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    "{% set s = 'x' * 30000 %}{% set t = [s, s, s, s] | map('upper') | join %}",
    "{% set s = 'x' * 50000 %}{{ s.join([s] * 1000) }}",
    "{% set s = 'x' * 50000 %}{{ ('{0}' * 1000).format(s) }}",
    "{{ range(10) | batch(10000000000) | list }}",
    "{{ lipsum(1000000) }}",
])
def test_output_and_intermediate_sizes_are_bounded(source: str) -> None:
    assert_stops_quickly(source, match="characters|size of|longer than")


def test_huge_numbers_are_refused() -> None:
    assert_stops_quickly("{{ 10 ** 100000000 }}", match="too large")
    assert render("{{ 2 ** 10 }}") == "1024"


def test_size_limit_is_configurable() -> None:
    assert render("{{ 'x' * 50 }}", render_limits=RenderLimits(max_chars=50)) == "x" * 50
    with pytest.raises(RenderLimitExceeded, match="50 characters"):
        render("{{ 'x' * 51 }}", render_limits=RenderLimits(max_chars=50))


# -- errors and caching -----------------------------------------------------------------------


def test_compile_error_names_the_line() -> None:
    with pytest.raises(TemplateCompileError, match=r"^template does not compile: line 2: "):
        render("ok\n{% if %}")


def test_compile_errors_are_cached_and_still_raised() -> None:
    for _ in range(2):
        with pytest.raises(TemplateCompileError):
            compile_template("{% for %}")


def test_unknown_tag_does_not_compile() -> None:
    with pytest.raises(TemplateCompileError, match="do"):
        render("{% do messages.append(1) %}")


def test_runtime_errors_are_one_line_with_the_line_number() -> None:
    with pytest.raises(TemplateRaisedError) as info:
        render("line one\n{{ messages[0].content.nope.deeper }}")
    assert "at line 2" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(TemplateRaisedError, match="TypeError"):
        render("{{ 1 + 'a' }}")


def test_compiled_templates_are_cached() -> None:
    source = "{{ messages[0].content }} cached"
    assert compile_template(source) is compile_template(source)


def test_rendering_is_fast() -> None:
    """The analyzer renders each template dozens of times; per-render overhead must stay small."""
    source = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if m.tool_calls %}"
              "{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}"
              "{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
    messages = USER + call_message(ARGS) * 5
    render_template(source, messages)
    started = time.perf_counter()
    for _ in range(200):
        render_template(source, messages, add_generation_prompt=True)
    assert (time.perf_counter() - started) / 200 < 0.005


def test_a_template_may_mutate_its_own_lists_but_not_its_inputs() -> None:
    from autoparser.render import SandboxViolation, render_template

    source = "{% set seen = namespace(ids=[]) %}{% set _ = seen.ids.append('a') %}{{ seen.ids | tojson }}"
    assert render_template(source, [{"role": "user", "content": "hi"}]) == '["a"]'
    with pytest.raises(SandboxViolation):
        render_template("{% set _ = seen.append(1) %}{% set _ = messages.append(1) %}",
                        [{"role": "user", "content": "hi"}], seen=[])
