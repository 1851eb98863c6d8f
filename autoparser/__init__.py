"""autoparser: infer a chat model's output format from its chat template, then parse, constrain and serve it."""

import importlib

from autoparser.analysis import Analysis, ContentAnalysis, ReasoningAnalysis, ToolsAnalysis

__all__ = ["Analysis", "ContentAnalysis", "ReasoningAnalysis", "ToolsAnalysis", "analyze", "load"]
__version__ = "0.1.0"


def analyze(template_source: str, bos_token: str = "", eos_token: str = "", **template_kwargs):  # type: ignore[no-untyped-def]
    """Analyze a chat template's source text; see `autoparser.analyzers.analyze`."""
    from autoparser.analyzers import analyze as _analyze

    return _analyze(template_source, bos_token=bos_token, eos_token=eos_token, **template_kwargs)


# Import the submodule first: importing `autoparser.load` later would rebind the package attribute
# `load` to the module, hiding the function below.
importlib.import_module("autoparser.load")


def load(path: str | None = None, **kwargs):  # type: ignore[no-untyped-def]
    """Load and analyze a template from a .jinja file, tokenizer_config.json, model folder or .gguf."""
    from autoparser.load import load as _load

    return _load(path, **kwargs)
