"""Bridges from the lab's trained drafters to other engines' formats.

`eagle3`: the shipped `eagle` drafter as an EAGLE-3 checkpoint (SpecForge's `LlamaForCausalLMEagle3`
layout), which llama.cpp's own `convert_hf_to_gguf.py` turns into a draft GGUF for
`llama-server --spec-type draft-eagle3`.
"""
from __future__ import annotations

from importlib import import_module

__all__ = ["Eagle3Export", "convert_to_gguf", "eagle3_config", "eagle3_tensors", "export_eagle3",
           "find_llama_cpp_src", "gguf_command"]


def __getattr__(name: str):
    """Lazily (PEP 562): the shell lists `export-eagle3` without importing torch."""
    if name in __all__:
        return getattr(import_module(".eagle3", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
