"""`autoparser.load`: every input kind, every failure as a one-line `LoadError`."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

import autoparser
from autoparser.load import (
    GGUFReadError,
    LoadError,
    MissingFile,
    NoChatTemplate,
    UnreadableFile,
    load_template,
)

# `autoparser.load` is both a function and a submodule's name; take the module from sys.modules.
load_module = importlib.import_module("autoparser.load")

DEFAULT = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
TOOL_USE = "TOOLS {{ tools | tojson }}" + DEFAULT
BOS, EOS = "<|begin|>", "<|end|>"


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def added_token(text: str) -> dict[str, Any]:
    """How tokenizer configs often spell a special token."""
    return {"__type": "AddedToken", "content": text, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False}


def write_gguf(path: Path, template: Any = None, tokens: list[str] | None = None,
               bos_id: int | None = None, eos_id: int | None = None) -> Path:
    """A weight-less GGUF with just the tokenizer metadata we read."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    if template is not None:
        writer.add_chat_template(template)
    if tokens is not None:
        writer.add_token_list(tokens)
        writer.add_token_merges(["a b", "ab c"])
    if bos_id is not None:
        writer.add_bos_token_id(bos_id)
    if eos_id is not None:
        writer.add_eos_token_id(eos_id)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- template files ---------------------------------------------------------------------------


def test_jinja_file(tmp_path: Path) -> None:
    path = tmp_path / "model.jinja"
    path.write_text(DEFAULT, encoding="utf-8")
    found = load_template(path)
    assert (found.source, found.name, found.origin) == (DEFAULT, "default", str(path))
    assert (found.bos_token, found.eos_token) == ("", "")
    assert found.templates == {"default": DEFAULT}


def test_string_path_and_home_expansion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "t.jinja").write_text(DEFAULT, encoding="utf-8")
    assert load_template("~/t.jinja").source == DEFAULT


# -- tokenizer_config.json --------------------------------------------------------------------


def test_config_with_string_template_and_plain_tokens(tmp_path: Path) -> None:
    path = write_json(tmp_path / "tokenizer_config.json",
                      {"chat_template": DEFAULT, "bos_token": BOS, "eos_token": EOS})
    found = load_template(path)
    assert (found.source, found.bos_token, found.eos_token) == (DEFAULT, BOS, EOS)


def test_config_with_added_token_dicts(tmp_path: Path) -> None:
    path = write_json(tmp_path / "tokenizer_config.json",
                      {"chat_template": DEFAULT, "bos_token": added_token(BOS), "eos_token": added_token(EOS)})
    found = load_template(path)
    assert (found.bos_token, found.eos_token) == (BOS, EOS)


def test_config_with_null_tokens(tmp_path: Path) -> None:
    path = write_json(tmp_path / "tokenizer_config.json", {"chat_template": DEFAULT, "bos_token": None})
    assert (load_template(path).bos_token, load_template(path).eos_token) == ("", "")


@pytest.mark.parametrize(("tools", "name", "expected"), [
    (False, None, "default"),
    (True, None, "tool_use"),
    (False, "tool_use", "tool_use"),
    (True, "default", "default"),
])
def test_config_with_named_templates(tmp_path: Path, tools: bool, name: str | None, expected: str) -> None:
    path = write_json(tmp_path / "tokenizer_config.json", {
        "chat_template": [{"name": "default", "template": DEFAULT}, {"name": "tool_use", "template": TOOL_USE}],
        "eos_token": EOS,
    })
    found = load_template(path, tools=tools, name=name)
    assert found.name == expected
    assert found.source == {"default": DEFAULT, "tool_use": TOOL_USE}[expected]
    assert found.templates == {"default": DEFAULT, "tool_use": TOOL_USE}
    assert found.eos_token == EOS


def test_named_templates_without_tool_use_fall_back_to_default(tmp_path: Path) -> None:
    path = write_json(tmp_path / "tokenizer_config.json",
                      {"chat_template": [{"name": "default", "template": DEFAULT}, {"name": "rag", "template": "R"}]})
    assert load_template(path, tools=True).name == "default"


def test_named_templates_without_default_is_an_error(tmp_path: Path) -> None:
    path = write_json(tmp_path / "tokenizer_config.json", {"chat_template": [
        {"name": "rag", "template": "R"}, {"name": "tool_use", "template": TOOL_USE}]})
    with pytest.raises(NoChatTemplate, match="no default chat template; pick one of: rag, tool_use"):
        load_template(path)
    assert load_template(path, tools=True).name == "tool_use"


def test_unknown_template_name(tmp_path: Path) -> None:
    path = write_json(tmp_path / "tokenizer_config.json", {"chat_template": DEFAULT})
    with pytest.raises(NoChatTemplate, match="no chat template named 'rag'"):
        load_template(path, name="rag")


def test_chat_template_json_file(tmp_path: Path) -> None:
    write_json(tmp_path / "tokenizer_config.json", {"bos_token": BOS, "eos_token": EOS})
    path = write_json(tmp_path / "chat_template.json", {"chat_template": DEFAULT})
    found = load_template(path)
    assert (found.source, found.bos_token, found.eos_token) == (DEFAULT, BOS, EOS)


# -- model folders ----------------------------------------------------------------------------


def test_folder_with_tokenizer_config(tmp_path: Path) -> None:
    write_json(tmp_path / "tokenizer_config.json", {"chat_template": DEFAULT, "bos_token": BOS, "eos_token": EOS})
    found = load_template(tmp_path)
    assert (found.source, found.bos_token, found.eos_token, found.origin) == (DEFAULT, BOS, EOS, str(tmp_path))


def test_folder_with_chat_template_jinja_beside_config(tmp_path: Path) -> None:
    """Newer transformers save the template as chat_template.jinja; it wins over the config."""
    write_json(tmp_path / "tokenizer_config.json", {"chat_template": "old", "eos_token": added_token(EOS)})
    (tmp_path / "chat_template.jinja").write_text(DEFAULT, encoding="utf-8")
    extra = tmp_path / "additional_chat_templates"
    extra.mkdir()
    (extra / "tool_use.jinja").write_text(TOOL_USE, encoding="utf-8")
    found = load_template(tmp_path)
    assert (found.source, found.eos_token) == (DEFAULT, EOS)
    assert load_template(tmp_path, tools=True).source == TOOL_USE


def test_folder_with_chat_template_json_and_special_tokens_map(tmp_path: Path) -> None:
    write_json(tmp_path / "chat_template.json", {"chat_template": DEFAULT})
    write_json(tmp_path / "special_tokens_map.json", {"bos_token": added_token(BOS), "eos_token": EOS})
    found = load_template(tmp_path)
    assert (found.source, found.bos_token, found.eos_token) == (DEFAULT, BOS, EOS)


def test_chat_template_jinja_file_reads_sibling_tokens(tmp_path: Path) -> None:
    write_json(tmp_path / "tokenizer_config.json", {"bos_token": BOS, "eos_token": EOS})
    path = tmp_path / "chat_template.jinja"
    path.write_text(DEFAULT, encoding="utf-8")
    assert (load_template(path).bos_token, load_template(path).eos_token) == (BOS, EOS)


def test_folder_with_one_gguf(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf", DEFAULT, ["<unk>", BOS, EOS], 1, 2)
    found = load_template(tmp_path)
    assert (found.source, found.bos_token, found.eos_token) == (DEFAULT, BOS, EOS)


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(NoChatTemplate, match="no chat template in"):
        load_template(tmp_path)


def test_folder_whose_config_has_no_template(tmp_path: Path) -> None:
    write_json(tmp_path / "tokenizer_config.json", {"eos_token": EOS})
    with pytest.raises(NoChatTemplate):
        load_template(tmp_path)


# -- GGUF -------------------------------------------------------------------------------------


def test_gguf_with_template_and_tokens(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", DEFAULT, ["<unk>", BOS, EOS, "hello"], bos_id=1, eos_id=2)
    found = load_template(path)
    assert (found.source, found.bos_token, found.eos_token, found.name) == (DEFAULT, BOS, EOS, "default")


def test_gguf_named_templates(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", [{"name": "default", "template": DEFAULT},
                                            {"name": "tool_use", "template": TOOL_USE}], ["a", "b"], 0, 1)
    assert load_template(path).source == DEFAULT
    found = load_template(path, tools=True)
    assert (found.name, found.source) == ("tool_use", TOOL_USE)
    assert found.templates == {"default": DEFAULT, "tool_use": TOOL_USE}


def test_gguf_without_token_ids_has_empty_tokens(tmp_path: Path) -> None:
    found = load_template(write_gguf(tmp_path / "m.gguf", DEFAULT))
    assert (found.bos_token, found.eos_token) == ("", "")


def test_gguf_with_out_of_range_token_id(tmp_path: Path) -> None:
    found = load_template(write_gguf(tmp_path / "m.gguf", DEFAULT, ["a"], bos_id=0, eos_id=7))
    assert (found.bos_token, found.eos_token) == ("a", "")


def test_gguf_without_template(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", None, ["a"], 0, 0)
    with pytest.raises(NoChatTemplate, match="has no tokenizer.chat_template"):
        load_template(path)


def test_gguf_detected_by_magic_without_suffix(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "model.bin", DEFAULT, ["a"], 0, 0)
    assert load_template(path).source == DEFAULT


def test_truncated_gguf(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", DEFAULT, ["<unk>"] * 50, 0, 0)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(GGUFReadError, match="not a readable GGUF file"):
        load_template(path)


def test_not_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(GGUFReadError):
        load_template(path)


def test_real_vocabulary_gguf_is_read_fast_without_tensors() -> None:
    """A real 100k-token vocabulary: metadata only, the special tokens resolved by id."""
    import time

    from corpora import deepseek_vocab_gguf

    path = deepseek_vocab_gguf()
    started = time.perf_counter()
    reader = load_module._open_gguf(path)
    assert time.perf_counter() - started < 2.0
    assert reader.tensors == []
    assert reader.token(reader.scalar("tokenizer.ggml.bos_token_id")) == "<｜begin▁of▁sentence｜>"
    assert reader.token(reader.scalar("tokenizer.ggml.eos_token_id")) == "<｜end▁of▁sentence｜>"
    with pytest.raises(NoChatTemplate):
        load_template(path)


# -- failures ---------------------------------------------------------------------------------


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(MissingFile, match="no such file or directory"):
        load_template(tmp_path / "nope.jinja")


def test_unreadable_json(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer_config.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(UnreadableFile, match="is not valid JSON"):
        load_template(path)


def test_json_without_template(tmp_path: Path) -> None:
    with pytest.raises(NoChatTemplate, match="no chat_template in"):
        load_template(write_json(tmp_path / "tokenizer_config.json", {"eos_token": EOS}))


def test_json_that_is_not_an_object(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match="does not hold a JSON object"):
        load_template(write_json(tmp_path / "tokenizer_config.json", [1, 2]))


def test_malformed_named_templates(tmp_path: Path) -> None:
    path = write_json(tmp_path / "tokenizer_config.json", {"chat_template": [{"name": "default"}]})
    with pytest.raises(UnreadableFile, match="chat_template entries"):
        load_template(path)


def test_binary_template_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(UnreadableFile, match="not UTF-8"):
        load_template(path)


def test_empty_template_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text("  \n", encoding="utf-8")
    with pytest.raises(NoChatTemplate, match="is empty"):
        load_template(path)


def test_needs_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(LoadError):
        load_template()
    with pytest.raises(LoadError):
        load_template(tmp_path, hf="org/model")


def test_every_error_is_a_one_line_value_error(tmp_path: Path) -> None:
    for bad in (tmp_path / "missing", tmp_path):
        with pytest.raises(ValueError) as info:
            load_template(bad)
        assert "\n" not in str(info.value)


# -- Hugging Face Hub cache -------------------------------------------------------------------


def _fake_hub(monkeypatch: pytest.MonkeyPatch, snapshot: Path, remote: Path | None = None) -> list[tuple[str, bool]]:
    """Replace `hf_hub_download` with a local imitation: cached files live in `snapshot`, and a
    download copies a file from `remote` into `snapshot`, as the real cache does."""
    pytest.importorskip("huggingface_hub")
    import huggingface_hub

    calls: list[tuple[str, bool]] = []

    def download(repo_id: str, filename: str, local_files_only: bool = False, **_: Any) -> str:
        calls.append((filename, local_files_only))
        if not local_files_only and remote is not None and (remote / filename).is_file():
            (snapshot / filename).write_bytes((remote / filename).read_bytes())
        if (snapshot / filename).is_file():
            return str(snapshot / filename)
        kind = "LocalEntryNotFoundError" if local_files_only else "RemoteEntryNotFoundError"
        raise type(kind, (Exception,), {})(f"{filename} not found")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    return calls


def test_hf_from_cache_without_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_json(tmp_path / "tokenizer_config.json", {"chat_template": DEFAULT, "eos_token": EOS})
    calls = _fake_hub(monkeypatch, tmp_path)
    found = load_template(hf="org/model")
    assert (found.source, found.eos_token, found.origin) == (DEFAULT, EOS, "hf:org/model")
    assert calls and all(local for _, local in calls)


def test_hf_downloads_what_the_cache_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, remote = tmp_path / "cache", tmp_path / "remote"
    cache.mkdir()
    remote.mkdir()
    write_json(cache / "tokenizer_config.json", {"eos_token": EOS})
    (remote / "chat_template.jinja").write_text(DEFAULT, encoding="utf-8")
    calls = _fake_hub(monkeypatch, cache, remote)
    found = load_template(hf="org/model")
    assert (found.source, found.eos_token) == (DEFAULT, EOS)
    assert ("chat_template.jinja", False) in calls


def test_hf_repo_without_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_json(tmp_path / "tokenizer_config.json", {"eos_token": EOS})
    _fake_hub(monkeypatch, tmp_path, tmp_path / "nothing-remote")
    with pytest.raises(NoChatTemplate):
        load_template(hf="org/model")


def test_hf_unavailable_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("huggingface_hub")
    import huggingface_hub

    def offline(repo_id: str, filename: str, local_files_only: bool = False, **_: Any) -> str:
        raise type("LocalEntryNotFoundError" if local_files_only else "ConnectError", (Exception,), {})(
            "cannot reach the Hub\nsecond line")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(LoadError) as info:
        load_template(hf="org/model")
    assert "cannot be downloaded" in str(info.value) and "\n" not in str(info.value)


# -- load() -----------------------------------------------------------------------------------


def test_load_analyzes_with_the_found_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_analyze(source: str, bos_token: str = "", eos_token: str = "", **kwargs: Any) -> str:
        seen.update(source=source, bos=bos_token, eos=eos_token, kwargs=kwargs)
        return "analysis"

    monkeypatch.setattr(autoparser, "analyze", fake_analyze)
    path = write_json(tmp_path / "tokenizer_config.json", {
        "chat_template": [{"name": "default", "template": DEFAULT}, {"name": "tool_use", "template": TOOL_USE}],
        "bos_token": BOS, "eos_token": added_token(EOS)})
    assert load_module.load(path, tools=True) == "analysis"
    assert seen == {"source": TOOL_USE, "bos": BOS, "eos": EOS, "kwargs": {}}


def test_public_load_is_the_function_even_after_the_submodule_is_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing `autoparser.load` (the module) must not replace `autoparser.load` (the function)."""
    monkeypatch.setattr(autoparser, "analyze", lambda source, **kwargs: source)
    path = tmp_path / "t.jinja"
    path.write_text(DEFAULT, encoding="utf-8")
    assert callable(autoparser.load)
    assert autoparser.load(str(path)) == DEFAULT


def test_load_propagates_load_errors(tmp_path: Path) -> None:
    with pytest.raises(MissingFile):
        load_module.load(tmp_path / "missing.gguf")


def test_hf_with_the_real_client_and_a_cached_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real `hf_hub_download(local_files_only=True)` on a cache laid out as the Hub's client
    lays it out; offline mode is on, so nothing can be downloaded."""
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--org--model"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    write_json(snapshot / "tokenizer_config.json", {"bos_token": BOS, "eos_token": added_token(EOS)})
    (snapshot / "chat_template.jinja").write_text(DEFAULT, encoding="utf-8")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    found = load_template(hf="org/model")
    assert (found.source, found.bos_token, found.eos_token, found.origin) == (DEFAULT, BOS, EOS, "hf:org/model")
