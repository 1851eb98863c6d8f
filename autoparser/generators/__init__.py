"""Generators: pure functions from an `Analysis` (plus a request's tools) to text.

* `gbnf` — llama.cpp GBNF of the output language, with schema-typed tool arguments
  (`schema_gbnf` converts JSON Schema, `regex_gbnf` translates ``pattern`` regexes,
  `gbnf_builder` holds the escaping and rule bookkeeping they share, `gbnf_members` the rules
  of members in order);
* `lark` — a Lark grammar of the same language.
"""

from autoparser.generators.gbnf import (
    GrammarResult,
    build_grammar,
    generate_gbnf,
    json_object_grammar,
    json_schema_grammar,
)
from autoparser.generators.schema_gbnf import SchemaGrammar, schema_to_gbnf

__all__ = [
    "GrammarResult",
    "SchemaGrammar",
    "build_grammar",
    "generate_gbnf",
    "json_object_grammar",
    "json_schema_grammar",
    "schema_to_gbnf",
]
