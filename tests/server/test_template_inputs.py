"""A template that needs a variable beyond the conversation (`template_inputs`) renders in the
server: the request's tools reach the variable that carries them, as JSON text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tiny_model"]

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "templates" / "catalog_inputs.jinja"
TOOLS = [{"type": "function", "function": {"name": "lookup_city", "description": "Looks a city up.",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def test_the_request_tools_reach_the_template_variable(tiny_models: Any) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    import autoparser
    from autoparser.llama.engine import Engine
    from autoparser.server.protocol import parse_request
    from autoparser.server.service import ChatService, ServerSettings

    template = FIXTURE.read_text(encoding="utf-8")
    with Engine(str(tiny_models.path(template)), n_ctx=2048) as engine:
        analysis = autoparser.analyze(engine.chat_template or "", bos_token=engine.bos_token,
                                      eos_token=engine.eos_token)
        assert analysis.template_inputs == {"tool_catalog": "tools_text", "session_label": "text"}
        service = ChatService(analysis, engine, ServerSettings(model_name="tiny"))
        try:
            messages = [{"role": "user", "content": "Where is Oslo?"}]
            with_tools = service.prepare(parse_request({"messages": messages, "tools": TOOLS}))
            without = service.prepare(parse_request({"messages": messages}))
        finally:
            service.close()
    assert '"lookup_city"' in with_tools.prompt
    assert "lookup_city" not in without.prompt and without.prompt.endswith("<<assistant>>")
