"""SGLang plugin entry point: registers the `autoparser` function-call and reasoning detectors.

SGLang runs `register()` through its `sglang.srt.plugins` entry point before it parses the
command line, so `--tool-call-parser autoparser --reasoning-parser autoparser` are accepted
after `pip install 'autoparser[sglang]'`.
"""

from __future__ import annotations


def register() -> None:
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    from autoparser.plugins.common import PLUGIN_NAME
    from autoparser.plugins.sglang_parsers import AutoparserDetector, AutoparserReasoningDetector

    FunctionCallParser.ToolCallParserEnum[PLUGIN_NAME] = AutoparserDetector
    ReasoningParser.DetectorMap[PLUGIN_NAME] = AutoparserReasoningDetector
