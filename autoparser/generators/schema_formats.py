"""GBNF rules for the text of a JSON Schema string ``format``.

date, time, date-time, uuid, email (loosely), ipv4, hostname and uri (loosely); the text of
each never needs JSON escapes.
"""

from __future__ import annotations

from autoparser.generators.gbnf_builder import GrammarBuilder

FORMATS = {
    "date": "date",
    "time": "time",
    "date-time": "date-time",
    "uuid": "uuid",
    "email": "email",
    "idn-email": "email",
    "ipv4": "ipv4",
    "hostname": "hostname",
    "uri": "uri",
    "uri-reference": "uri",
    "iri": "uri",
    "url": "uri",
}


def format_rule(b: GrammarBuilder, fmt: str) -> str:
    """A rule for the text of a string `format`; the text never needs JSON escapes."""
    # valid month/day pairs; February stops at 28 (leap years are not worth a grammar)
    b.fixed("fmt-date", '[0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | '
                        '( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | '
                        '"02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) )')
    b.fixed("fmt-time", '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? '
                        '( "Z" | [+\\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )')
    kind = FORMATS[fmt]
    if kind == "date":
        return "fmt-date"
    if kind == "time":
        return "fmt-time"
    if kind == "date-time":
        return b.fixed("fmt-date-time", 'fmt-date "T" fmt-time')
    if kind == "uuid":
        return b.fixed("fmt-uuid", '[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}')
    if kind == "email":
        b.fixed("fmt-label", "[a-zA-Z0-9] [a-zA-Z0-9\\-]{0,30}")
        return b.fixed("fmt-email", '[a-zA-Z0-9._%+\\-]{1,40} "@" fmt-label ( "." fmt-label ){1,3}')
    if kind == "ipv4":
        b.fixed("fmt-octet", '"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]')
        return b.fixed("fmt-ipv4", 'fmt-octet "." fmt-octet "." fmt-octet "." fmt-octet')
    if kind == "hostname":
        b.fixed("fmt-label", "[a-zA-Z0-9] [a-zA-Z0-9\\-]{0,30}")
        return b.fixed("fmt-hostname", 'fmt-label ( "." fmt-label ){0,4}')
    return b.fixed("fmt-uri", '[a-zA-Z] [a-zA-Z0-9+.\\-]{0,15} ":" [^ "\\\\<>\\x00-\\x1F\\x7F]{1,200}')
