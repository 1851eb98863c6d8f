"""Renders in child processes: the same text and errors as rendering in-process, and a render
that outruns its time is stopped by killing its child, whatever it was doing."""

from __future__ import annotations

import time

import pytest

from autoparser.render import RenderLimitExceeded, TemplateRaisedError, render_template
from autoparser.render_process import ProcessLimits, RenderPool

TURNS = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
         "{% if tools %}<|tools|>{{ tools | tojson }}{% endif %}"
         "{% if add_generation_prompt %}<|assistant|>{% if think %}<think>{% endif %}{% endif %}")
USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
CALL = [*USER, {"role": "assistant", "content": "", "tool_calls": [
    {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}]
LOOP = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


@pytest.fixture(scope="module")
def pool():  # type: ignore[no-untyped-def]
    with RenderPool(TURNS, eos_token="<|end|>") as rendering:
        yield rendering


@pytest.mark.parametrize("messages, tools, kwargs", [
    (USER, None, {}), (USER, TOOLS, {"think": True}), (CALL, TOOLS, {}), ([{"role": "user", "content": "é\u2028"}], None, {}),
])
def test_renders_equal_the_in_process_ones(pool: RenderPool, messages: list, tools: list | None, kwargs: dict) -> None:
    expected = render_template(TURNS, messages, tools=tools, add_generation_prompt=True, eos_token="<|end|>", **kwargs)
    assert pool.render(messages, tools=tools, add_generation_prompt=True, **kwargs) == expected


def test_errors_keep_their_kind_and_message() -> None:
    source = "{{ raise_exception('no system role') }}"
    with pytest.raises(TemplateRaisedError) as in_process:
        render_template(source, USER)
    with RenderPool(source) as pool, pytest.raises(TemplateRaisedError) as isolated:
        pool.render(USER)
    assert str(isolated.value) == str(in_process.value)


def test_a_render_past_its_time_is_killed_and_the_next_one_works() -> None:
    """The loop would run to the 2 s render deadline; the child is killed at 0.5 s instead, as it
    would be inside one uninterruptible call."""
    source = "{% if messages[0].content == 'slow' %}" + LOOP + "{% endif %}" + TURNS
    with RenderPool(source, size=1, process_limits=ProcessLimits(kill_after=0.5)) as pool:
        started = time.monotonic()
        with pytest.raises(RenderLimitExceeded, match="took longer than 0.5 s and was stopped"):
            pool.render([{"role": "user", "content": "slow"}])
        assert time.monotonic() - started < 1.5
        assert pool.render(USER) == "<|user|>hi<|end|><|assistant|>"


def test_memory_past_the_child_cap_is_an_error_not_the_parents_problem() -> None:
    """Each string is within the renderer's size limit; together they pass the child's cap."""
    hoard = ("{% set ns = namespace(kept=[]) %}{% for i in range(200) %}"
             "{% set _ = ns.kept.append(('x' * 3999990) ~ i) %}{% endfor %}{{ ns.kept | length }}")
    with RenderPool(hoard, size=1, process_limits=ProcessLimits(memory_bytes=300 << 20)) as pool:
        with pytest.raises(RenderLimitExceeded, match="memory"):
            pool.render(USER)
        with pytest.raises(RenderLimitExceeded, match="memory"):
            pool.render(USER)  # the child (or its replacement) still answers


def test_a_json_py_in_the_working_directory_is_never_imported(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Users run the server from a downloaded model folder; its files are not code to run."""
    (tmp_path / "json.py").write_text("raise SystemExit('json.py from the working directory ran')\n")
    monkeypatch.chdir(tmp_path)
    with RenderPool(TURNS) as pool:
        assert pool.render(USER) == "<|user|>hi<|end|><|assistant|>"
