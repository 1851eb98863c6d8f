"""Through a real server on DeepSeek-R1's original template (the prompt ends at `<｜Assistant｜>`,
and the template never writes `<think>`): a long answer streams as it is generated, not as one
chunk at the end (policy rule `role-from-prompt`: the output starts inside reasoning)."""

from __future__ import annotations

import pytest
from server_harness import ServerProcess, find_template, start_server, tiny_model

TOKENS = 200


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    model = tiny_model(find_template("hfjs-e2e__deepseek-ai-DeepSeek-R1.jinja"))
    process = start_server(model, "--n-ctx", "1024", log_dir=tmp_path_factory.mktemp("r1-stream"))
    yield process
    process.stop()


def test_a_long_answer_arrives_in_many_chunks(server: ServerProcess) -> None:
    stream = server.client().chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Tell me about Paris."}], stream=True,
        max_tokens=TOKENS, seed=3, extra_body={"ignore_eos": True})
    texts: list[str] = []
    for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            text = (getattr(delta, "reasoning_content", None) or "") + (delta.content or "")
            if text:
                texts.append(text)
    assert len(texts) > 20, f"{len(texts)} chunks, the longest {max(map(len, texts), default=0)} characters"
    assert max(map(len, texts)) <= 200
