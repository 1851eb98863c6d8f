"""vLLM plugin entry point: registers the `autoparser` tool and reasoning parsers.

vLLM calls `register()` through its `vllm.general_plugins` entry point in every process (the API
server before it checks parser names, and the engine core), so `--tool-call-parser autoparser
--reasoning-parser autoparser` work after `pip install 'autoparser[vllm]'`. Registration is lazy:
the parser classes (`autoparser.plugins.vllm_parsers`) and the template analysis load only when
vLLM first asks for a parser.
"""

from __future__ import annotations

from pathlib import Path

PARSERS_MODULE = "autoparser.plugins.vllm_parsers"


def register() -> None:
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    from autoparser.plugins.common import PLUGIN_NAME

    ToolParserManager.register_lazy_module(PLUGIN_NAME, PARSERS_MODULE, "AutoparserToolParser")
    ReasoningParserManager.register_lazy_module(PLUGIN_NAME, PARSERS_MODULE, "AutoparserReasoningParser")


def plugin_path() -> Path:
    """The file to pass to `--tool-parser-plugin` / `--reasoning-parser-plugin` where entry points
    are not loaded (importing it registers both parsers)."""
    return Path(__file__).with_name("vllm_parsers.py")
