"""Find a model's chat template, and its BOS/EOS tokens, wherever the model keeps them.

Accepted inputs (`load_template`):

* a template file (`.jinja` or any other text file);
* a `tokenizer_config.json` (or `chat_template.json`), whose `chat_template` is a string or a
  list of `{"name", "template"}` variants;
* a model folder holding those files, or `chat_template.jinja`, `additional_chat_templates/`,
  or a single `.gguf`;
* a `.gguf` file, of which only the metadata header is read;
* `hf="org/model"`: the model's files in the Hugging Face cache, downloaded only when not cached.

Named variants are chosen as transformers chooses them: an explicit `name`, else `tool_use` when
tools will be used and the model has one, else `default`.

Every failure is a `LoadError` (a `ValueError`) with a one-line message.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "GGUFReadError",
    "HubError",
    "LoadError",
    "MissingFile",
    "NoChatTemplate",
    "TemplateSource",
    "UnreadableFile",
    "load",
    "load_template",
]


class LoadError(ValueError):
    """The input names no usable chat template."""


class MissingFile(LoadError):
    """The path does not exist."""


class UnreadableFile(LoadError):
    """The file exists but cannot be read or parsed."""


class NoChatTemplate(LoadError):
    """The input was read, but holds no chat template (or not the requested variant)."""


class GGUFReadError(UnreadableFile):
    """The file is not a GGUF file the `gguf` package can read."""


class HubError(LoadError):
    """The Hugging Face Hub could not provide the model's files."""


@dataclass
class TemplateSource:
    """A chat template and what it needs to render.

    `source` is the chosen template, `name` the variant it was chosen as, `templates` every
    variant the input holds (name -> source), `origin` where it came from (for messages).
    """

    source: str
    bos_token: str = ""
    eos_token: str = ""
    name: str = "default"
    origin: str = ""
    templates: dict[str, str] = field(default_factory=dict)


# -- public entry points ----------------------------------------------------------------------


def load_template(path: str | Path | None = None, hf: str | None = None, tools: bool = False,
                  name: str | None = None) -> TemplateSource:
    """The chat template at `path` (file or folder) or of Hub model `hf`."""
    if (path is None) == (hf is None):
        raise LoadError("give exactly one of a path or an hf model id")
    if hf is not None:
        return _from_hub(hf, tools, name)
    if not str(path).strip():
        raise MissingFile("empty path")
    return _from_path(Path(path).expanduser(), tools, name)  # type: ignore[arg-type]


def load(path: str | Path | None = None, hf: str | None = None, tools: bool = False,
         name: str | None = None, **analyze_kwargs: Any):  # type: ignore[no-untyped-def]
    """Load a template (see `load_template`) and analyze it with its BOS/EOS tokens."""
    import autoparser

    found = load_template(path, hf=hf, tools=tools, name=name)
    return autoparser.analyze(found.source, bos_token=found.bos_token, eos_token=found.eos_token,
                              **analyze_kwargs)


# -- paths ------------------------------------------------------------------------------------


def _from_path(path: Path, tools: bool, name: str | None) -> TemplateSource:
    if not path.exists():
        raise MissingFile(f"no such file or directory: {path}")
    if path.is_dir():
        return _from_folder(path, tools, name)
    if not path.is_file():
        raise UnreadableFile(f"{path} is not a regular file")
    if path.suffix.lower() == ".gguf" or _has_gguf_magic(path):
        return _from_gguf(path, tools, name)
    if path.suffix.lower() == ".json":
        config = _read_json(path)
        found = _from_config(config, str(path), tools, name)
        if path.name == "chat_template.json":
            found.bos_token, found.eos_token = _sibling_special_tokens(path.parent)
        return found
    source = _read_text(path)
    if not source.strip():
        raise NoChatTemplate(f"{path} is empty")
    bos, eos = _sibling_special_tokens(path.parent) if path.name == "chat_template.jinja" else ("", "")
    return TemplateSource(source, bos, eos, "default", str(path), {"default": source})


def _from_folder(folder: Path, tools: bool, name: str | None) -> TemplateSource:
    """A model folder as transformers saves it: `chat_template.jinja` (and named variants under
    `additional_chat_templates/`) take precedence over `chat_template.json`, which takes
    precedence over `tokenizer_config.json`'s `chat_template`."""
    templates: dict[str, str] = {}
    config_path = folder / "tokenizer_config.json"
    config = _read_json(config_path) if config_path.is_file() else {}
    if config.get("chat_template") is not None:
        templates.update(_named_templates(config["chat_template"], config_path))
    json_path = folder / "chat_template.json"
    if json_path.is_file():
        value = _read_json(json_path).get("chat_template")
        if value is not None:
            templates.update(_named_templates(value, json_path))
    jinja_path = folder / "chat_template.jinja"
    if jinja_path.is_file():
        templates["default"] = _read_text(jinja_path)
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        for file in sorted(extra.glob("*.jinja")):
            templates[file.stem] = _read_text(file)
    if not templates:
        ggufs = sorted(folder.glob("*.gguf"))
        if len(ggufs) == 1 and not config_path.is_file():
            return _from_gguf(ggufs[0], tools, name)
        raise NoChatTemplate(f"no chat template in {folder} (looked for chat_template.jinja, "
                             "chat_template.json and tokenizer_config.json"
                             + (f"; {len(ggufs)} .gguf files, pass one" if ggufs else "") + ")")
    bos, eos = _special_tokens(config, folder)
    return _choose(templates, tools, name, str(folder), bos, eos)


def _from_config(config: dict[str, Any], origin: str, tools: bool, name: str | None) -> TemplateSource:
    value = config.get("chat_template")
    if value is None:
        raise NoChatTemplate(f"no chat_template in {origin}")
    templates = _named_templates(value, Path(origin))
    bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
    return _choose(templates, tools, name, origin, bos, eos)


def _named_templates(value: Any, origin: Path) -> dict[str, str]:
    """`chat_template` as a name -> source dict; a lone string is the `default` variant."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list):
        named = {}
        for entry in value:
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                    and isinstance(entry.get("template"), str)):
                raise UnreadableFile(f"{origin}: chat_template entries must be {{\"name\", \"template\"}} objects")
            named[entry["name"]] = entry["template"]
        return named
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return dict(value)
    raise UnreadableFile(f"{origin}: chat_template must be a string or a list of named templates")


def _choose(templates: dict[str, str], tools: bool, name: str | None, origin: str,
            bos: str, eos: str) -> TemplateSource:
    """Pick the variant as transformers does: asked-for name, tool_use with tools, default."""
    if name is not None:
        chosen = name
    elif tools and "tool_use" in templates:
        chosen = "tool_use"
    elif "default" in templates:
        chosen = "default"
    elif len(templates) == 1:
        chosen = next(iter(templates))
    else:
        raise NoChatTemplate(f"{origin} has no default chat template; pick one of: {', '.join(sorted(templates))}")
    if chosen not in templates:
        raise NoChatTemplate(f"{origin} has no chat template named {chosen!r}; it has: {', '.join(sorted(templates))}")
    source = templates[chosen]
    if not source.strip():
        raise NoChatTemplate(f"the {chosen!r} chat template in {origin} is empty")
    return TemplateSource(source, bos, eos, chosen, origin, templates)


def _special_tokens(config: dict[str, Any], folder: Path) -> tuple[str, str]:
    """BOS/EOS from tokenizer_config.json, falling back to special_tokens_map.json."""
    bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
    if bos and eos:
        return bos, eos
    mapping_path = folder / "special_tokens_map.json"
    if mapping_path.is_file():
        try:
            mapping = _read_json(mapping_path)
        except LoadError:
            mapping = {}
        bos = bos or _token_text(mapping.get("bos_token"))
        eos = eos or _token_text(mapping.get("eos_token"))
    return bos, eos


def _sibling_special_tokens(folder: Path) -> tuple[str, str]:
    config_path = folder / "tokenizer_config.json"
    try:
        config = _read_json(config_path) if config_path.is_file() else {}
    except LoadError:
        config = {}
    return _special_tokens(config, folder)


def _token_text(value: Any) -> str:
    """A special token as tokenizer configs write it: a string, or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return ""


MAX_FILE_BYTES = 64 << 20
"""The largest template or JSON file read; tokenizer configs with big vocabularies stay well below."""


def read_bounded_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """A regular file's text, refusing devices, FIFOs (a symlink to /dev/zero) and files over
    `limit` bytes before reading them whole. Raises `UnreadableFile`."""
    path = Path(path)
    try:
        if not path.is_file():
            raise UnreadableFile(f"{path} is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise UnreadableFile(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UnreadableFile(f"{path} is larger than {limit >> 20} MB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableFile(f"{path} is not UTF-8 text") from None


def parse_json_text(text: str, origin: str) -> Any:
    """JSON text as Python values; malformed or absurdly nested JSON is an `UnreadableFile`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableFile(f"{origin} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise UnreadableFile(f"{origin} is nested too deeply to be a JSON file this tool reads") from None


def _read_text(path: Path) -> str:
    return read_bounded_text(path)


def _read_json(path: Path) -> dict[str, Any]:
    value = parse_json_text(_read_text(path), str(path))
    if not isinstance(value, dict):
        raise UnreadableFile(f"{path} does not hold a JSON object")
    return value


# -- GGUF -------------------------------------------------------------------------------------

_GGUF_MAGIC = b"GGUF"
_TEMPLATE_KEY = "tokenizer.chat_template"


def _has_gguf_magic(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == _GGUF_MAGIC
    except OSError:
        return False


def _from_gguf(path: Path, tools: bool, name: str | None) -> TemplateSource:
    reader = _open_gguf(path)
    templates: dict[str, str] = {}
    for key, value_field in reader.fields.items():
        if key == _TEMPLATE_KEY:
            templates["default"] = _gguf_string(value_field, path, key)
        elif key.startswith(_TEMPLATE_KEY + "."):
            templates[key[len(_TEMPLATE_KEY) + 1:]] = _gguf_string(value_field, path, key)
    if not templates:
        raise NoChatTemplate(f"{path} has no {_TEMPLATE_KEY} in its metadata")
    bos = reader.token(reader.scalar("tokenizer.ggml.bos_token_id"))
    eos = reader.token(reader.scalar("tokenizer.ggml.eos_token_id"))
    return _choose(templates, tools, name, str(path), bos, eos)


def _gguf_string(value_field: Any, path: Path, key: str) -> str:
    try:
        value = value_field.contents()
    except (ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, str):
        raise GGUFReadError(f"{path}: metadata {key} is not a string")
    return value


def _open_gguf(path: Path) -> Any:
    try:
        reader = _metadata_reader_class()(path)
    except LoadError:
        raise
    except (ValueError, KeyError, IndexError, OSError, struct.error, OverflowError) as exc:
        raise GGUFReadError(f"{path} is not a readable GGUF file: {_one_line(exc)}") from None
    except (RecursionError, MemoryError) as exc:  # metadata shaped to exhaust the reader
        raise GGUFReadError(f"{path} is not a readable GGUF file: its metadata is too large or too "
                            f"deeply nested ({type(exc).__name__})") from None
    return reader


_READER_CLASS: Any = None
_MAX_GGUF_NESTING = 64


def _metadata_reader_class() -> Any:
    """A `gguf.GGUFReader` that reads the metadata header and nothing else.

    `GGUFReader` memory-maps the file (so tensor data is never read) but parses every array
    element into its own numpy view and builds every tensor descriptor, which takes seconds for
    a real vocabulary (150k tokens plus merges). This subclass keeps the reader's parsing of the
    header and scalar/string fields and overrides two steps: arrays are parsed into one offset
    table instead of one view per element, and tensor descriptors are skipped. Tokens are
    then decoded one at a time, only the ones asked for.
    """
    global _READER_CLASS
    if _READER_CLASS is not None:
        return _READER_CLASS
    try:
        import numpy as np
        from gguf import GGUFReader, GGUFValueType
    except ImportError:
        raise LoadError("reading .gguf files needs the gguf package: pip install gguf") from None

    class MetadataReader(GGUFReader):  # type: ignore[misc, valid-type]
        def __init__(self, path: Path) -> None:
            self._arrays: dict[int, tuple[int, np.ndarray]] = {}
            super().__init__(path, "r")

        def _get_field_parts(self, orig_offs: int, raw_type: int):  # type: ignore[no-untyped-def]
            if GGUFValueType(raw_type) != GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            item_type = GGUFValueType(int(self._get(orig_offs, np.uint32)[0]))
            length = int(self._get(orig_offs + 4, np.uint64)[0])
            start = orig_offs + 12
            if item_type == GGUFValueType.STRING:
                offsets, end = self._string_offsets(start, length)
            elif item_type in self.gguf_scalar_to_np:
                itemsize = np.dtype(self.gguf_scalar_to_np[item_type]).itemsize
                offsets, end = np.empty(0, dtype=np.uint64), start + itemsize * length
                if end > len(self.data):
                    raise ValueError(f"an array of {length:,} items runs past the end of the file")
            elif item_type == GGUFValueType.ARRAY:
                # arrays of arrays hold no chat template: skipped without recursion
                offsets, end = np.empty(0, dtype=np.uint64), self._nested_arrays_end(start, length)
            else:
                return super()._get_field_parts(orig_offs, raw_type)
            self._arrays[orig_offs] = (int(item_type), offsets)
            marker = np.array([orig_offs], dtype=np.uint64)
            return end - orig_offs, [marker], [], [GGUFValueType.ARRAY, item_type]

        def _string_offsets(self, start: int, count: int) -> tuple[Any, int]:
            """Each string's offset, found by hopping over the 8-byte length prefixes."""
            if count * 8 > len(self.data) - start:  # checked before allocating the offset table
                raise ValueError(f"a string array of {count:,} items runs past the end of the file")
            order = ">" if self.byte_order == "S" else "<"
            view = memoryview(self.data)
            read_length = struct.Struct(order + "Q").unpack_from
            offsets = np.empty(count, dtype=np.uint64)
            offset = start
            for index in range(count):
                offsets[index] = offset
                offset += 8 + read_length(view, offset)[0]
            if offset > len(self.data):
                raise ValueError("string array runs past the end of the file")
            return offsets, offset

        def _nested_arrays_end(self, start: int, count: int) -> int:
            """Where an array of `count` arrays starting at `start` ends, walked with an explicit
            stack (nesting depth at most `_MAX_GGUF_NESTING`), every length checked against the file."""
            order = ">" if self.byte_order == "S" else "<"
            view, size = memoryview(self.data), len(self.data)
            header, length_prefix = struct.Struct(order + "IQ"), struct.Struct(order + "Q")
            pending = [[int(GGUFValueType.ARRAY), count]]  # [item type, items left] per open array
            offset = start
            while pending:
                level = pending[-1]
                if level[1] == 0:
                    pending.pop()
                    continue
                item_type = GGUFValueType(level[0])
                if item_type in self.gguf_scalar_to_np:
                    offset += np.dtype(self.gguf_scalar_to_np[item_type]).itemsize * level[1]
                    level[1] = 0
                elif item_type == GGUFValueType.STRING:
                    level[1] -= 1
                    offset += 8 + length_prefix.unpack_from(view, offset)[0] if offset + 8 <= size else 8
                elif item_type == GGUFValueType.ARRAY:
                    level[1] -= 1
                    if len(pending) >= _MAX_GGUF_NESTING:
                        raise ValueError(f"arrays nested more than {_MAX_GGUF_NESTING} deep")
                    if offset + 12 > size:
                        raise ValueError("a nested array runs past the end of the file")
                    inner_type, inner_count = header.unpack_from(view, offset)
                    offset += 12
                    pending.append([int(GGUFValueType(inner_type)), inner_count])
                else:
                    raise ValueError(f"unknown value type {item_type}")
                if offset > size:
                    raise ValueError("a nested array runs past the end of the file")
            return offset

        def _build_tensor_info(self, offs: int, count: int):  # type: ignore[no-untyped-def]
            return offs, []

        def _build_tensors(self, start_offs: int, fields: Any) -> None:
            self.tensors = []

        def scalar(self, key: str) -> Any:
            value_field = self.fields.get(key)
            if value_field is None or len(value_field.types) != 1:
                return None
            try:
                return value_field.contents()
            except (ValueError, IndexError):
                return None

        def token(self, token_id: Any) -> str:
            """The text of token `token_id` in `tokenizer.ggml.tokens`, or ''."""
            value_field = self.fields.get("tokenizer.ggml.tokens")
            if value_field is None or not isinstance(token_id, int | np.integer):
                return ""
            entry = self._arrays.get(int(value_field.parts[-1][0]))
            if entry is None or entry[0] != int(GGUFValueType.STRING):
                return ""
            offsets = entry[1]
            if not 0 <= int(token_id) < len(offsets):
                return ""
            length, raw = self._get_str(int(offsets[int(token_id)]))
            return bytes(raw).decode("utf-8", errors="replace")

    _READER_CLASS = MetadataReader
    return _READER_CLASS


# -- Hugging Face Hub -------------------------------------------------------------------------

_HUB_FILES = ("tokenizer_config.json", "chat_template.jinja", "chat_template.json", "special_tokens_map.json")


def _from_hub(repo_id: str, tools: bool, name: str | None) -> TemplateSource:
    """Resolve through the local Hub cache first (works offline), then download what is missing."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise LoadError("--hf needs huggingface-hub: pip install 'autoparser[hf]'") from None
    cached_error: LoadError | None = None
    folder = _hub_snapshot(hf_hub_download, repo_id, local_only=True)
    if folder is not None:
        try:
            return _relabel(_from_folder(folder, tools, name), f"hf:{repo_id}")
        except NoChatTemplate as exc:  # a partial cache; the template may be in a file not yet fetched
            cached_error = exc
    try:
        folder = _hub_snapshot(hf_hub_download, repo_id, local_only=False)
    except HubError:
        if cached_error is not None:
            raise cached_error from None
        raise
    if folder is None:
        raise HubError(f"hf:{repo_id} has none of {', '.join(_HUB_FILES)}")
    return _relabel(_from_folder(folder, tools, name), f"hf:{repo_id}")


def _hub_snapshot(download: Any, repo_id: str, local_only: bool) -> Path | None:
    """The snapshot folder holding whichever of `_HUB_FILES` the repo has, or None.

    Online, the first failure that is not "this file does not exist" (no network, offline mode)
    ends the attempt at once: the Hub client retries with back-off, and paying that for each
    of the four files would make an offline miss take minutes.
    """
    folder = None
    for filename in _HUB_FILES:
        try:
            folder = Path(download(repo_id, filename, local_files_only=local_only)).parent
        except Exception as exc:  # hub errors vary by version; each file is optional
            if _is_fatal_hub_error(exc):
                raise HubError(f"hf:{repo_id}: {_one_line(exc)}") from None
            if not local_only and not _is_missing_entry(exc):
                raise HubError(f"hf:{repo_id} is not cached and cannot be downloaded: {_one_line(exc)}") from None
    return folder


def _is_fatal_hub_error(exc: Exception) -> bool:
    kind = type(exc).__name__
    return kind in ("RepositoryNotFoundError", "GatedRepoError", "HFValidationError", "RevisionNotFoundError")


def _is_missing_entry(exc: Exception) -> bool:
    """The Hub answered that the file does not exist (as opposed to: it could not be asked)."""
    kind = type(exc).__name__
    return "EntryNotFound" in kind and not kind.startswith("Local")


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return (text[:200] + "...") if len(text) > 200 else (text or type(exc).__name__)


def _relabel(found: TemplateSource, origin: str) -> TemplateSource:
    found.origin = origin
    return found
