"""autoparser inside serving engines: a vLLM and an SGLang parser named `autoparser`.

Importing this package is cheap: the engine-specific modules import their engine only when the
engine asks for a parser. `common` holds what both engines share (the analysis of the served
tokenizer's chat template, cached once per process, and the per-request parser cache).
"""
