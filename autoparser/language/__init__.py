"""The model's output language: what every backend (the streaming parser, the GBNF and Lark
grammars, the standalone module) must agree on about a format and a request.

* `request`: where the output starts (`start_state`, from the rendered prompt), which tools and
  argument types a request allows, and the format rules that are easy to get subtly different in
  each backend: the call index inside a name's end marker, the keys that hold JSON arguments, a
  code fence written without its language tag, weak (punctuation-only) markers.
* `values`: how an argument written as a tagged value or a Python literal becomes JSON.
* `ir`: the output language as data (markers, free text up to markers, sequence, choice,
  repetition, typed values, capture roles, weak markers, lazy dispatch), with a printer.
* `build`: `build_language(analysis, request)`, the one place that knows formats: it turns an
  analysis and a request into the `ir.Language` that the GBNF backend writes.
* `interpret`: `LanguageReader`, the streaming reader of a language: text in, OpenAI deltas out.
* `reading`: `Parser`, one request's parser: the reader of the language the parser reads.
* `message`: where parsed text goes (reasoning, content, tool calls) and the deltas it makes;
  `markers`: finding markers in streamed text; `jsonscan`: an incremental JSON scanner.

Standard library only: the standalone module embeds these files. The generators import from
here, and nothing here imports them.
"""
