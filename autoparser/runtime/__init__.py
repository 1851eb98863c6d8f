"""The parser runtime: turns model output into OpenAI messages and streaming deltas.

One engine serves every output format; it is driven by the analysis, never by the model's name.
Standard library only, so that `autoparser.generators.module` can inline it into a standalone
module.
"""

from autoparser.runtime.engine import StreamParser
from autoparser.runtime.parser import Parser

__all__ = ["Parser", "StreamParser"]
