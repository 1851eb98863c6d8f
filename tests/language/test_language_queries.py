"""What the server and the plugins ask the language instead of the analysis: its markers, the
markers around reasoning, and what opens a call (`ir.Language`)."""

from __future__ import annotations

import analyses
from analyses import DS_CALL, DS_EOS, DS_SECTION, DS_SEP

from autoparser.language import ir
from autoparser.language.build import Request, build_language


def _reading(analysis) -> ir.Language:  # type: ignore[no-untyped-def]
    return build_language(analysis, Request(reading=True, lazy=False))


def test_the_reading_language_names_its_markers() -> None:
    language = _reading(analyses.deepseek_v31())
    assert {"<think>", "</think>", DS_SECTION[0], DS_SECTION[1], DS_CALL[0], DS_CALL[1], DS_SEP,
            DS_EOS} <= language.markers()
    assert language.reasoning_markers() == {"<think>", "</think>"}
    assert DS_SECTION[0] in language.call_openers() and "</think>" not in language.call_openers()


def test_a_template_without_reasoning_has_no_reasoning_markers() -> None:
    language = _reading(analyses.hermes())
    assert not language.reasoning_markers()
    assert "<tool_call>" in language.call_openers()


def test_walk_visits_every_node_once_without_recursion() -> None:
    deep: ir.Node = ir.Lit("x")
    for _ in range(5000):
        deep = ir.Seq((ir.Lit("a"), deep))
    nodes = list(ir.walk(deep))
    assert len(nodes) == 5000 * 2 + 1
    assert ir.children(ir.Choice((ir.Lit("p"), ir.Lit("q")))) == (ir.Lit("p"), ir.Lit("q"))


def test_a_language_written_as_json_reads_back_to_the_same_language() -> None:
    import json

    from autoparser.language.interpret import LanguageReader

    for name in ("deepseek_v31", "qwen3", "kimi_k2", "llama32_pythonic", "glm45", "deepseek_v32"):
        analysis = getattr(analyses, name)()
        language = build_language(analysis, Request(tools=tuple(analyses.WEATHER_TOOLS), reading=True,
                                                    lazy=False))
        back = ir.from_json(json.loads(json.dumps(ir.to_json(language))))
        assert str(back) == str(language)
        assert back == language
        output = analyses.render_output(analysis, "Plan.", "Sure.", [("get_weather", {"city": "Paris"})])
        read = LanguageReader(back).parse(output)
        expected = LanguageReader(language).parse(output)
        assert [c["function"] for c in read["tool_calls"]] == [c["function"] for c in expected["tool_calls"]]
        assert (read["content"], read["reasoning_content"]) == (expected["content"], expected["reasoning_content"])


def test_one_analysis_built_twice_gives_equal_languages() -> None:
    """Equality is structural: value nodes holding schemas (dicts) compare by content, and equal
    nodes hash alike, so a language can be compared and cached by value."""
    for name in ("deepseek_v31", "qwen3", "kimi_k2", "llama32_pythonic", "glm45", "qwen3_coder"):
        for request in (Request(tools=tuple(analyses.WEATHER_TOOLS), reading=True, lazy=False),
                        Request(tools=tuple(analyses.WEATHER_TOOLS))):
            one = build_language(getattr(analyses, name)(), request)
            other = build_language(getattr(analyses, name)(), request)
            assert one is not other and one == other and hash(one) == hash(other), name
            assert ir.to_json(one) == ir.to_json(other)
    value = ir.Json("schema", "f", {"type": "object"}, {"type": "string"}, "$/properties/a", "a")
    assert value == ir.Json("schema", "f", {"type": "object"}, {"type": "string"}, "$/properties/a", "a")
    assert value != ir.Json("schema", "f", {"type": "object"}, {"type": "integer"}, "$/properties/a", "a")
