"""No code runs from the current directory: a folder holding a `json.py` (a downloaded model
folder, where users run `autoparser analyze .` and `autoparser serve`) stays inert.

Every child process the project starts is checked from such a folder: the analysis child
(`python -P -m autoparser.isolation`), the model worker that `multiprocessing` spawns (with its
resource tracker), and the whole server. Each hostile module writes a marker file when imported;
no marker may appear.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from autoparser.isolation import analyze_isolated, safe_python_path
from autoparser.server.supervisor import EngineFacts, EngineSettings, SupervisedWorker

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
# Modules a child interpreter imports (or may import) after it starts: a copy of any of them in
# the current directory would run if that directory were on its path.
SHADOWED = ("json", "pickle", "socket", "struct", "selectors", "runpy", "signal", "threading",
            "tempfile", "random", "typing", "dataclasses", "subprocess", "multiprocessing", "jinja2",
            "numpy", "llama_cpp", "autoparser")


def hostile_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in SHADOWED:
        (path / f"{name}.py").write_text(
            f"open({str(path / ('RAN-' + name))!r}, 'w').write('imported from the current directory')\n")
    (path / "template.jinja").write_text(TEMPLATE)
    return path


def markers(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("RAN-*"))


def console_script() -> Path:
    script = Path(sys.executable).with_name("autoparser")
    if not script.is_file():
        pytest.skip("the `autoparser` command is not installed next to this interpreter")
    return script


def test_analyze_from_a_folder_holding_a_json_py(tmp_path: Path) -> None:
    folder = hostile_folder(tmp_path)
    done = subprocess.run([str(console_script()), "analyze", "template.jinja", "--json"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"generation_prompt"' in done.stdout
    assert markers(folder) == []


def test_the_analysis_child_ignores_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = hostile_folder(tmp_path)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", ".", "relative/dir"]))
    analysis = analyze_isolated(TEMPLATE)
    assert analysis.generation_prompt == "<|assistant|>"
    assert markers(folder) == []


def test_only_absolute_python_path_entries_reach_the_child() -> None:
    entries = safe_python_path(os.pathsep.join(["", ".", "lib", "/opt/lib", "/opt/lib"]))
    assert entries[1:] == ["/opt/lib"] and all(os.path.isabs(entry) for entry in entries)


def ready_worker(_settings: EngineSettings, conn: Connection, _busy_since: Any) -> None:
    """A stand-in model worker (module level: the spawned child imports it by name)."""
    conn.send(("ready", EngineFacts(os.getpid(), 64, 1, False)))
    conn.recv()


def test_the_spawned_model_worker_ignores_the_current_directory(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    folder = hostile_folder(tmp_path)
    monkeypatch.chdir(folder)
    before = os.environ.get("PYTHONSAFEPATH")
    worker = SupervisedWorker(EngineSettings("unused.gguf", 64, 1), max_queue=1, target=ready_worker)
    try:
        facts = worker.start(timeout=60)
        assert facts.pid != os.getpid()
    finally:
        worker.stop()
    assert markers(folder) == []
    assert os.environ.get("PYTHONSAFEPATH") == before


@pytest.mark.slow
def test_serve_from_a_folder_holding_a_json_py(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from server_harness import find_template, start_server, tiny_model

    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    folder = hostile_folder(tmp_path / "model")  # the documented use: serve from the model's folder
    shutil.copy(model, folder / "model.gguf")
    started = time.monotonic()
    server = start_server(Path("model.gguf"), "--n-ctx", "512", "--parallel", "1", log_dir=tmp_path,
                          cwd=folder, serve=[str(console_script()), "serve"])
    try:
        answer = server.http().post("/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert answer.status_code == 200, answer.text
    finally:
        server.stop()
    print(f"served from the hostile folder in {time.monotonic() - started:.1f} s")
    assert markers(folder) == [], server.log()[-2000:]
