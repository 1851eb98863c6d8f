"""The parser's support modules: where parsed text goes and how deltas are made (`channels`), the
incremental JSON scanner (`jsonscan`) and the marker matcher (`markers`), used by the streaming
reader of the output language (`autoparser.language.interpret`). Standard library only, so that
`autoparser.generators.module` can embed them.

`Parser` (`autoparser.language.reading`) is exported here too, under the name it has always
had.
"""

from typing import Any

__all__ = ["Parser"]


def __getattr__(name: str) -> Any:
    # imported on first use: the reader imports this package's modules, so importing it here
    # eagerly would make `autoparser.language.interpret` import itself half-initialized
    if name == "Parser":
        from autoparser.language.reading import Parser

        return Parser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
