"""The bridge's command: `export-eagle3` (the shipped eagle drafter as an EAGLE-3 checkpoint for llama.cpp)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import SpecDecError
from ..options import Command, add_model_options


def export_eagle3_options(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--out", type=Path, required=True, help="the checkpoint folder to write")
    add_model_options(ex, device=False, dtype=False)
    ex.add_argument("--gguf", type=Path, metavar="FILE", help="also run llama.cpp's convert_hf_to_gguf.py on it (f32, "
                    "--target-model-dir = the lab's converted target) and write the draft GGUF to FILE")
    ex.add_argument("--llama-cpp-src", type=Path, metavar="DIR", help="with --gguf: the llama.cpp source folder (default: "
                    "$SPECDEC_LLAMA_CPP_SRC, else the one `make llama-server` unpacks)")


def run_export_eagle3_command(args: argparse.Namespace) -> None:
    from .eagle3 import convert_to_gguf, export_eagle3, find_llama_cpp_src, gguf_command

    if args.llama_cpp_src and not args.gguf:
        raise SpecDecError("--llama-cpp-src needs --gguf")
    src = find_llama_cpp_src(args.llama_cpp_src) if args.gguf else None  # before the export: fail fast
    export = export_eagle3(args.out, args.model)
    print(f"EAGLE-3 checkpoint: {export.path} ({len(export.shapes)} tensors, draft vocabulary "
          f"{export.config['draft_vocab_size']}, target layers {export.config['eagle_aux_hidden_state_layer_ids']})")
    if args.gguf:
        draft = convert_to_gguf(export, args.gguf, src)
        print(f"draft GGUF: {draft}")
    else:
        draft = Path("DRAFT.gguf")
        print("convert with llama.cpp's converter: " + " ".join(gguf_command(export.path, draft, Path("LLAMA_CPP_SRC"),
                                                                             export.target_dir)))
    print(f"serve: llama-server -m TARGET.gguf -md {draft} --spec-type draft-eagle3 --spec-draft-n-max 4")


COMMANDS = (
    Command("export-eagle3", "write the shipped eagle drafter as an EAGLE-3 checkpoint (config.json + model.safetensors) "
                             "for llama.cpp's converter (--spec-type draft-eagle3)", export_eagle3_options,
            run_export_eagle3_command),
)
