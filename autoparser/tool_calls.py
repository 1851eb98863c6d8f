"""How a template writes tool calls: `ToolsAnalysis`, assembled from small typed parts.

Around the calls, `CallMarkers`::

    section_start  call_start CALL call_end  call_separator  call_start CALL call_end ...  section_end

A CALL is either

* `JsonCalls`: one JSON object, ``{"name": "f", "arguments": {...}}``, whose key names the part
  holds (optionally nested under `function_field`); with `array` the calls are the elements of one
  JSON array and the markers above are its punctuation; or
* `TagCalls`: ``name.start NAME name.end [id] ARGUMENTS``, where the id (`CallId`) sits after the
  name or, `before_name`, right after `call_start` (or, `name.in_id`, the id stands where the
  name would and holds it), and ARGUMENTS are either `JsonArguments` (one
  JSON object, maybe in a wrapper such as a fence) or `TaggedArguments` (each argument in its own
  markup, values encoded as raw strings, JSON or Python literals).

The serialized form (`to_dict`, CONTRACT section 3) is one flat object whose key names
(`name_end`, `arg_key_end`, `id_before_name`, ...) every consumer reads; `from_dict` reads it back.
Those names also read as attributes of a `ToolsAnalysis`, with the serialized values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# The serialized form, in order, with each key's value when its part is absent.
FLAT_DEFAULTS: dict[str, Any] = {
    "supported": False, "format": "none",
    "section_start": "", "section_end": "", "call_start": "", "call_end": "", "call_separator": "",
    "parallel": False,
    "name_start": "", "name_end": "", "args_start": "", "args_end": "",
    "name_field": "name", "args_field": "arguments", "id_field": None, "function_field": None,
    "array": False, "args_as_string": False,
    "arg_start": "", "arg_key_end": "", "arg_end": "", "arg_separator": "", "arg_string_raw": True,
    "arg_end_keyed": False, "arg_python": False, "arg_key_end_json": "",
    "arg_nested": "", "arg_nested_quote": "", "arg_nested_item": "",
    "arg_nested_start": "", "arg_nested_key_end": "", "arg_nested_end": "",
    "id_start": "", "id_end": "", "id_before_name": False,
    "content_allowed": True, "opened_by_prompt": False,
    "call_index": "", "call_index_base": 0, "name_in_id": False,
}

# Serialized only when set (a nested syntax's own brackets and member end), read back when present.
SET_ONLY = ("arg_nested_brackets", "arg_nested_member_end")

INDEX_HOLE = "{index}"
KEY_HOLE = "{key}"
NAME_HOLE = "{name}"  # in `JsonArguments.end`: a closing tag named after the tool (`</{name}>`)
ID_HOLE = "{id}"  # in `call_end`: the call's id, written after its arguments (` AS {id}`)
# In `TaggedArguments.key_end_before_json`: the JSON type of the value that follows, by JSON's own
# names (`string`, `number`, `boolean`, `null`, `object`, `array`): `<arg key="k" type="{type}">`.
TYPE_HOLE = "{type}"
JSON_TYPES = ("string", "number", "boolean", "null", "object", "array")


@dataclass(frozen=True)
class CallMarkers:
    """The text around and between calls; empty where the template writes nothing."""

    section_start: str = ""
    section_end: str = ""
    call_start: str = ""
    call_end: str = ""
    call_separator: str = ""

    def flat(self) -> dict[str, Any]:
        return {"section_start": self.section_start, "section_end": self.section_end,
                "call_start": self.call_start, "call_end": self.call_end,
                "call_separator": self.call_separator}

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> CallMarkers:
        return cls(data["section_start"], data["section_end"], data["call_start"], data["call_end"],
                   data["call_separator"])


@dataclass(frozen=True)
class JsonCalls:
    """Each call is one JSON object; the fields name its keys."""

    name_field: str = "name"
    args_field: str = "arguments"
    id_field: str | None = None
    function_field: str | None = None  # the key the name and arguments are nested under
    array: bool = False  # the calls are the elements of one JSON array
    args_as_string: bool = False  # the arguments are a JSON object encoded as a JSON string
    format: Literal["json"] = field(default="json", init=False)

    def flat(self) -> dict[str, Any]:
        return {"name_field": self.name_field, "args_field": self.args_field, "id_field": self.id_field,
                "function_field": self.function_field, "array": self.array,
                "args_as_string": self.args_as_string}

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> JsonCalls:
        return cls(data["name_field"], data["args_field"], data["id_field"], data["function_field"],
                   data["array"], data["args_as_string"])


@dataclass(frozen=True)
class CallIndex:
    """The template numbers its calls inside the name's end marker (`:0<|x|>`, ` index="1"`);
    only set when two rendered calls carried consecutive numbers there."""

    marker: str  # the name's end marker with the number written `{index}`
    base: int = 0  # the first call's number


@dataclass(frozen=True)
class CallName:
    """``start NAME end``; `end` as the first call writes it. `in_id`: the template never writes
    the name, only the call's id, there (``start ID end``): the id holds the name, as models
    write it (`call.get_weather.0`)."""

    start: str = ""
    end: str = ""
    index: CallIndex | None = None
    in_id: bool = False

    def flat(self) -> dict[str, Any]:
        return {"name_start": self.start, "name_end": self.end,
                "call_index": self.index.marker if self.index else "",
                "call_index_base": self.index.base if self.index else 0, "name_in_id": self.in_id}

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> CallName:
        index = CallIndex(data["call_index"], data["call_index_base"]) if data["call_index"] else None
        return cls(data["name_start"], data["name_end"], index, bool(data["name_in_id"]))


@dataclass(frozen=True)
class CallId:
    """``start ID end``: after the name, or right after `call_start` when `before_name`."""

    start: str = ""
    end: str = ""
    before_name: bool = False

    def flat(self) -> dict[str, Any]:
        return {"id_start": self.start, "id_end": self.end, "id_before_name": self.before_name}

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> CallId | None:
        found = cls(data["id_start"], data["id_end"], data["id_before_name"])
        return found if found != cls() else None


@dataclass(frozen=True)
class JsonArguments:
    """The arguments as one JSON object, inside an optional wrapper (a ```` ```json ```` fence)."""

    start: str = ""
    end: str = ""
    format: Literal["tag_json"] = field(default="tag_json", init=False)

    def flat(self) -> dict[str, Any]:
        return {"args_start": self.start, "args_end": self.end}


ValueEncoding = Literal["raw_strings", "json", "python"]


@dataclass(frozen=True)
class NestedValues:
    """Objects and arrays inside an argument, when not written as JSON: "quoted" is JSON whose
    strings are quoted by `quote` and whose keys are bare (`{k:<|"|>v<|"|>}`), "tags" is markup
    around each member, ``start KEY key_end VALUE end`` (`end` names the key as `{key}`), the
    argument's own markup where those three are empty (`<city>Paris</city>` children of a
    `<parameter=place>`), an array's elements all named `item`; "bracketed" is an object between
    braces with `start` before each key, `key_end` after it and `end` between members (`{:k "v"
    :n 7}`), an array between square brackets with `end` between elements, strings quoted by
    `quote` (empty: as JSON); "indented" is a block of lines deeper than the argument's, an
    object's members `KEY key_end VALUE` and an array's elements each after `item`. Confirmed by
    rendering. A "bracketed" value may open and close otherwise than `{}` and `[]`: `brackets`
    are an object's opening and closing and an array's (`(obj`, `)`, `(vec`, `)`), and
    `member_end` closes each member (`(KEY VALUE)`); both serialized only when set."""

    style: Literal["quoted", "tags", "bracketed", "indented"]
    quote: str = ""
    item: str = ""
    start: str = ""
    key_end: str = ""
    end: str = ""
    brackets: tuple[str, ...] = ()
    member_end: str = ""


@dataclass(frozen=True)
class TaggedArguments:
    """Each argument in its own markup: ``start KEY key_end VALUE end``, joined by `separator`.

    `encoding`: "raw_strings" writes string values as bare text and every other value as JSON,
    "json" writes every value as JSON, "python" every value as a Python literal (`'text'`, `True`,
    as in ``[get_weather(location='Paris', days=3)]``). `key_end_before_json` replaces `key_end`
    before a non-string value when the template introduces those differently; where it names the
    value's JSON type, the name is `TYPE_HOLE` (and `key_end` is the string form). With
    `end_names_key`, `end` holds the key as `{key}`: ``<city>Paris</city>``.
    """

    start: str = ""
    key_end: str = ""
    end: str = ""
    separator: str = ""
    encoding: ValueEncoding = "raw_strings"
    end_names_key: bool = False
    key_end_before_json: str = ""
    nested: NestedValues | None = None
    format: Literal["tag_tagged"] = field(default="tag_tagged", init=False)

    def flat(self) -> dict[str, Any]:
        nested = self.nested
        return {"arg_start": self.start, "arg_key_end": self.key_end, "arg_end": self.end,
                "arg_separator": self.separator, "arg_string_raw": self.encoding == "raw_strings",
                "arg_end_keyed": self.end_names_key, "arg_python": self.encoding == "python",
                "arg_key_end_json": self.key_end_before_json, "arg_nested": nested.style if nested else "",
                "arg_nested_quote": nested.quote if nested else "", "arg_nested_item": nested.item if nested else "",
                "arg_nested_start": nested.start if nested else "",
                "arg_nested_key_end": nested.key_end if nested else "",
                "arg_nested_end": nested.end if nested else "",
                **({"arg_nested_brackets": list(nested.brackets)} if nested and nested.brackets else {}),
                **({"arg_nested_member_end": nested.member_end} if nested and nested.member_end else {})}

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> TaggedArguments:
        encoding: ValueEncoding = ("python" if data["arg_python"] else
                                   "raw_strings" if data["arg_string_raw"] else "json")
        nested = (NestedValues(data["arg_nested"], data["arg_nested_quote"], data["arg_nested_item"],
                               data.get("arg_nested_start", ""), data.get("arg_nested_key_end", ""),
                               data.get("arg_nested_end", ""), tuple(data.get("arg_nested_brackets") or ()),
                               data.get("arg_nested_member_end") or "")
                  if data["arg_nested"] else None)
        return cls(data["arg_start"], data["arg_key_end"], data["arg_end"], data["arg_separator"], encoding,
                   data["arg_end_keyed"], data["arg_key_end_json"], nested)


@dataclass(frozen=True)
class TagCalls:
    """A call written as markup around its name, an optional id and its arguments."""

    name: CallName = field(default_factory=CallName)
    arguments: JsonArguments | TaggedArguments = field(default_factory=JsonArguments)
    id: CallId | None = None

    @property
    def format(self) -> str:
        return self.arguments.format

    def flat(self) -> dict[str, Any]:
        return {**self.name.flat(), **self.arguments.flat(), **(self.id or CallId()).flat()}

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> TagCalls:
        arguments = (JsonArguments(data["args_start"], data["args_end"]) if data["format"] == "tag_json"
                     else TaggedArguments.from_flat(data))
        return cls(CallName.from_flat(data), arguments, CallId.from_flat(data))


@dataclass(frozen=True)
class ToolsAnalysis:
    """How tool calls are written; `calls` is None when the template writes none.

    `opened_by_prompt`: the generation prompt ends with the call opener (`>>>`), so the output
    starts inside a call header, where `content.start` (a recipient such as `all\\n`) introduces
    plain content instead.

    `from_instructions`: the template renders no call; the format is the example call its
    instructions show. Serialized only when set.
    """

    supported: bool = False
    parallel: bool = False
    markers: CallMarkers = field(default_factory=CallMarkers)
    calls: JsonCalls | TagCalls | None = None
    opened_by_prompt: bool = False
    content_allowed: bool = True
    from_instructions: bool = False

    @property
    def format(self) -> str:
        return self.calls.format if self.calls else "none"

    def to_dict(self) -> dict[str, Any]:
        """The flat serialized form (CONTRACT section 3)."""
        flat = {**FLAT_DEFAULTS, "supported": self.supported, "format": self.format, **self.markers.flat(),
                "parallel": self.parallel, **(self.calls.flat() if self.calls else {}),
                "content_allowed": self.content_allowed, "opened_by_prompt": self.opened_by_prompt}
        return {**flat, "from_instructions": True} if self.from_instructions else flat

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolsAnalysis:
        # a null marker is no marker: only the keys whose default is None may hold None
        flat = {**FLAT_DEFAULTS, **{k: v for k, v in data.items()
                                    if k in FLAT_DEFAULTS and (v is not None or FLAT_DEFAULTS[k] is None)},
                **{k: data[k] for k in SET_ONLY if data.get(k)}}
        calls: JsonCalls | TagCalls | None = (
            JsonCalls.from_flat(flat) if flat["format"] == "json"
            else TagCalls.from_flat(flat) if flat["format"] in ("tag_json", "tag_tagged") else None)
        return cls(flat["supported"], flat["parallel"], CallMarkers.from_flat(flat), calls,
                   flat["opened_by_prompt"], flat["content_allowed"], bool(data.get("from_instructions")))

    def flat_view(self) -> FlatTools:
        """The serialized keys read as attributes, the flat form taken once (`FlatTools`)."""
        return FlatTools(self)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: the serialized keys read as attributes
        # (`a.tools.name_end`), read-only, with the values and defaults of the typed parts. Each
        # read rebuilds the flat form: a reader of many keys takes `flat_view()` once.
        if name in FLAT_DEFAULTS:
            return self.to_dict()[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class FlatTools:
    """A `ToolsAnalysis` read by its serialized names (`tools.section_start`, `tools.arg_end`), as
    the builder reads the markers, its flat form built once; its fields and typed parts (`calls`,
    `markers`; what is typed beyond a marker's text, `CallIndex`, `NestedValues`) as they are."""

    __slots__ = ("typed", "flat")

    def __init__(self, typed: ToolsAnalysis) -> None:
        self.typed = typed
        self.flat = {key: value for key, value in typed.to_dict().items() if not hasattr(ToolsAnalysis, key)}

    def __getattr__(self, name: str) -> Any:
        flat = self.flat
        return flat[name] if name in flat else getattr(self.typed, name)
