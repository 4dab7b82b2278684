"""specdec_core/bridge/eagle3.py: the shipped `eagle` drafter as an EAGLE-3 checkpoint for llama.cpp.

(a) the export holds what llama.cpp's converter reads (config keys, tensor names and shapes, d2t as
    offsets onto the lab's vocab_ids), and an EAGLE-3 forward written here from llama.cpp's graph
    (src/models/eagle3.cpp, common/speculative.cpp), run on the exported tensors alone, gives the lab
    drafter's own logits on a real prompt's features, step for step, fed-back features included;
(b) when a llama-server binary and a llama.cpp source tree are here: llama.cpp's converter turns the
    export into a draft GGUF, and llama-server --spec-type draft-eagle3 accepts its drafts while its greedy
    text stays the plain server's.
"""
from __future__ import annotations

import importlib.util
import json
import math
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from specdec_core.bridge import eagle3
from specdec_core.drafters import EagleDrafter, EagleNet
from specdec_core.drafters.eagle import feature_layers
from specdec_core.drafters.weights import drafter_module, entry, load_module
from specdec_core.drafters.vocab import module_vocab
from specdec_core.sampling import SamplingParams
from conftest import llama_server_binary

PROMPT = "What is a Python list?"  # suite.jsonl:multi_turn-05's first turn


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> eagle3.Eagle3Export:
    return eagle3.export_eagle3(tmp_path_factory.mktemp("eagle3") / "ckpt")


# --- (a) the checkpoint ----------------------------------------------------------------------------


def test_export_writes_what_llama_cpp_converter_reads(exported):
    config = json.loads((exported.path / "config.json").read_text())
    target = json.loads((exported.target_dir / "config.json").read_text())
    shipped = entry("smollm2-135m", "eagle")["config"]
    h, n = shipped["hidden"], shipped["vocab"]
    # conversion/llama.py:50 detects EAGLE-3 by these two; :74-103 reads the rest
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["draft_vocab_size"] == n and config["vocab_size"] == target["vocab_size"]
    assert config["eagle_aux_hidden_state_layer_ids"] == shipped["layers"] == list(feature_layers(target["num_hidden_layers"]))
    assert config["target_hidden_size"] == target["hidden_size"] == h
    assert config["norm_before_residual"] is False and config["norm_before_fc"] is False
    assert config["rope_theta"] == target["rope_parameters"]["rope_theta"] and config["rms_norm_eps"] == target["rms_norm_eps"]

    tensors = load_file(exported.path / "model.safetensors")
    q_out, kv_out, ff = shipped["heads"] * shipped["head_dim"], shipped["kv_heads"] * shipped["head_dim"], shipped["intermediate"]
    expected = {"fc.weight": (h, 3 * h), "midlayer.input_layernorm.weight": (h,), "midlayer.hidden_norm.weight": (h,),
                "midlayer.self_attn.q_proj.weight": (q_out, 2 * h), "midlayer.self_attn.k_proj.weight": (kv_out, 2 * h),
                "midlayer.self_attn.v_proj.weight": (kv_out, 2 * h), "midlayer.self_attn.o_proj.weight": (h, q_out),
                "midlayer.post_attention_layernorm.weight": (h,), "midlayer.mlp.gate_proj.weight": (ff, h),
                "midlayer.mlp.up_proj.weight": (ff, h), "midlayer.mlp.down_proj.weight": (h, ff), "norm.weight": (h,),
                "lm_head.weight": (n, h), "d2t": (n,), "t2d": (target["vocab_size"],)}
    assert {name: tuple(t.shape) for name, t in tensors.items()} == expected
    assert all(t.dtype == torch.float32 for name, t in tensors.items() if name not in ("d2t", "t2d"))

    net = load_module("smollm2-135m", "eagle", EagleNet)
    ids = net.vocab_ids.long()
    # d2t: offsets, draft id i -> target id i + d2t[i] (what conversion/llama.py:345 adds back)
    assert tensors["d2t"].dtype == torch.int64
    assert torch.equal(torch.arange(n) + tensors["d2t"], ids)
    assert tensors["t2d"].dtype == torch.bool and int(tensors["t2d"].sum()) == n and bool(tensors["t2d"][ids].all())
    # the lab's head rows, copied: the target's tied embedding rows of vocab_ids, fp32 as the lab holds them
    head = load_file(exported.target_dir / "model.safetensors")["model.embed_tokens.weight"]
    assert torch.equal(tensors["lm_head.weight"], head[ids])
    assert torch.equal(tensors["fc.weight"], net.fuse.weight) and torch.equal(tensors["norm.weight"], net.final_norm)


def test_the_one_line_errors(tmp_path):
    from specdec_core.errors import SpecDecError

    with pytest.raises(SpecDecError, match="no llama.cpp source"):
        eagle3.find_llama_cpp_src(tmp_path)
    with pytest.raises(SpecDecError, match="tiny has no shipped eagle"):
        eagle3.export_eagle3(tmp_path / "x", "tiny")
    config = entry("smollm2-135m", "eagle")["config"]
    target = json.loads((eagle3.converted_model_dir() / "config.json").read_text())
    with pytest.raises(SpecDecError, match="must lie in"):
        eagle3.eagle3_config({**config, "layers": [2, 15, 30]}, target)  # 30: llama.cpp's NextN, not the lab's normed state


class Eagle3Reference:
    """EAGLE-3 as llama.cpp computes it, from the exported tensors and config alone (plus the target's
    token embeddings, which llama.cpp borrows too, src/models/eagle3.cpp:165-171). Float64.

    encode: fc over the target's layer inputs at `eagle_aux_hidden_state_layer_ids`, concatenated in
    that order (common/speculative.cpp:687-697). decode: pairs (token[P+1], g[P]) at position P
    (common/speculative.cpp:736-745) over a KV cache of earlier pairs; returns the full-vocabulary logits
    (d2t scatter, -inf elsewhere) and the pre-norm state that is fed back as the next g."""

    def __init__(self, folder: Path, embed: torch.Tensor) -> None:
        self.c = json.loads((folder / "config.json").read_text())
        self.w = {k: (v.double() if v.is_floating_point() else v) for k, v in load_file(folder / "model.safetensors").items()}
        self.embed = embed.detach().double()
        self.keys: list[torch.Tensor] = []  # per cached position: (kv_heads, hd) after RoPE
        self.values: list[torch.Tensor] = []

    def rms(self, x: torch.Tensor, weight: str) -> torch.Tensor:
        return self.w[weight] * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"])

    def rope(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """HF's rotate-half on HF-layout weights; llama.cpp permutes q/k rows and rotates adjacent pairs
        (conversion/llama.py:176-181, 260-264), the same map."""
        hd = x.shape[-1]
        inv = 1.0 / self.c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        cos, sin = torch.cos(pos * inv), torch.sin(pos * inv)
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), -1)

    def encode(self, layer_inputs: dict[int, torch.Tensor]) -> torch.Tensor:
        f = torch.cat([layer_inputs[l] for l in self.c["eagle_aux_hidden_state_layer_ids"]], -1).double()
        return f @ self.w["fc.weight"].T

    def decode(self, token: int, g: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        c, w = self.c, self.w
        heads, kvh, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        x = torch.cat((self.rms(self.embed[token], "midlayer.input_layernorm.weight"), self.rms(g, "midlayer.hidden_norm.weight")))
        q = self.rope((w["midlayer.self_attn.q_proj.weight"] @ x).view(heads, hd), pos)
        self.keys.append(self.rope((w["midlayer.self_attn.k_proj.weight"] @ x).view(kvh, hd), pos))
        self.values.append((w["midlayer.self_attn.v_proj.weight"] @ x).view(kvh, hd))
        k, v = torch.stack(self.keys, 1), torch.stack(self.values, 1)  # (kvh, T, hd): every earlier pair and this one
        group = heads // kvh
        att = torch.stack([torch.softmax(k[h // group] @ q[h] / math.sqrt(hd), -1) @ v[h // group] for h in range(heads)])
        ffn_inp = w["midlayer.self_attn.o_proj.weight"] @ att.reshape(-1) + g  # residual: the raw g
        y = self.rms(ffn_inp, "midlayer.post_attention_layernorm.weight")
        prenorm = ffn_inp + w["midlayer.mlp.down_proj.weight"] @ (F.silu(w["midlayer.mlp.gate_proj.weight"] @ y) * (w["midlayer.mlp.up_proj.weight"] @ y))
        draft = w["lm_head.weight"] @ self.rms(prenorm, "norm.weight")
        logits = torch.full((c["vocab_size"],), float("-inf"), dtype=torch.float64)
        logits[torch.arange(len(draft)) + w["d2t"]] = draft
        return logits, prenorm

    def truncate(self, n: int) -> None:
        """Keep the first n cached pairs (llama.cpp drops the drafted positions before the next seed step)."""
        del self.keys[n:], self.values[n:]


class Recording:
    """Wraps the drafter's ReducedVocab and keeps every full-vocabulary logits row it hands the draft loop."""

    def __init__(self, vocab) -> None:
        self.vocab, self.rows = vocab, []

    def logits(self, h):
        return self.vocab.logits(h)

    def expand(self, logits):
        self.rows.append(self.vocab.expand(logits))
        return self.rows[-1]


def test_an_eagle3_forward_of_the_export_gives_the_lab_drafters_logits(exported):
    """Two draft rounds on a real prompt in float64: after the prompt (one catch-up row, then 3 steps on
    fed-back features) and after a verification that accepted 2 drafts (three catch-up rows)."""
    from specdec_core import llama
    from specdec_core.models import load_model
    from transformers import DynamicCache

    lm = load_model("smollm2-135m", "cpu", "float64")
    prompt = lm.encode(PROMPT)
    ids = list(prompt)
    with torch.no_grad():
        # the target's greedy continuation, by transformers' own generate
        ids = lm.model.generate(torch.tensor([ids]), max_new_tokens=6, min_new_tokens=6, do_sample=False)[0].tolist()
        # The layer inputs llama.cpp extracts (t_layer_inp[il], src/models/llama.cpp:127) are transformers'
        # hidden_states[il]: computed here by transformers, not by the lab's forward.
        states = lm.model(torch.tensor([ids]), output_hidden_states=True, logits_to_keep=1).hidden_states
    p = len(prompt)
    ref = Eagle3Reference(exported.path, lm.model.model.embed_tokens.weight)
    layers = ref.c["eagle_aux_hidden_state_layer_ids"]
    g = ref.encode({l: states[l][0] for l in layers})  # (len(ids), H): one g per target position

    # the lab: its drafter, through the decode loop's own calls, on the lab forward's states
    net = drafter_module(lm, "eagle", EagleNet)
    drafter = EagleDrafter(net, module_vocab(net, lm.model.lm_head.weight), lm.model)
    drafter.vocab = Recording(drafter.vocab)
    _, hidden = llama.forward(lm.model, DynamicCache(), torch.tensor([ids]), hidden_layers=drafter.hidden_layers)
    hidden = {l: h[0] for l, h in hidden.items()}
    drafter.reset(prompt)
    drafter.prefill({l: h[:p] for l, h in hidden.items()})
    generator = torch.Generator().manual_seed(0)
    first = drafter.propose(ids[:p + 1], 4, SamplingParams(), generator).tokens
    drafter.observe(2, ids[p + 1:p + 4], {l: h[p:p + 5] for l, h in hidden.items()})
    second = drafter.propose(ids[:p + 4], 4, SamplingParams(), generator).tokens
    lab = drafter.vocab.rows
    assert len(lab) == 8 and len(first) == len(second) == 4

    # EAGLE-3 as llama.cpp computes it, on the lab's context: the lab starts its drafter at the prompt's
    # last position, so the reference's cache starts there too. (llama-server would also hold pairs for the
    # earlier prompt positions: the one runtime difference, bridge/eagle3.py's docstring.)
    ours = []

    def draft_after(logits: torch.Tensor, prenorm: torch.Tensor, pos: int, drafts: list[int]) -> None:
        """Four draft steps, each feeding the previous step's pre-norm state with the lab's draft (so
        that one wrong step shows as itself, not as every later step)."""
        for i in range(4):
            ours.append(logits)
            if i < 3:
                logits, prenorm = ref.decode(drafts[i], prenorm, pos + i)

    out = ref.decode(ids[p], g[p - 1], p - 1)  # the seed pair (token[P+1], g[P]) at the prompt's last position
    draft_after(*out, p, first)
    ref.truncate(1)  # the drafted positions' pairs go; verified ones come
    for t in range(p, p + 3):  # verify rows 0..2 (2 accepted): pairs (token[t+1], g[t]) at t
        out = ref.decode(ids[t + 1], g[t], t)
    draft_after(*out, p + 3, second)

    diffs = []
    for step, (a, b) in enumerate(zip(lab, ours)):
        a = a.detach().to(torch.float64)
        assert torch.equal(torch.isinf(a), torch.isinf(b)), f"step {step}: the drafts' vocabularies differ"
        finite = ~torch.isinf(a)
        diffs.append(float((a[finite] - b[finite]).abs().max()))
        assert diffs[-1] < 1e-5, f"step {step}: max |lab - EAGLE-3| = {diffs[-1]:.3g}"
    assert [int(row.argmax()) for row in ours] == first + second  # the same greedy drafts
    print(f"drafts {first} then {second}; max |lab - EAGLE-3| per step: " + " ".join(f"{d:.1e}" for d in diffs))


# --- (b) inside llama.cpp --------------------------------------------------------------------------


def llama_cpp_src() -> Path | None:
    try:
        return eagle3.find_llama_cpp_src()
    except Exception:
        return None


def why_not_llama_cpp() -> str | None:
    if llama_server_binary() is None:
        return "no llama-server binary: run `make llama-server` or set SPECDEC_LLAMA_SERVER=/path/to/llama-server"
    if llama_cpp_src() is None:
        return ("no llama.cpp source with convert_hf_to_gguf.py: set SPECDEC_LLAMA_CPP_SRC, or let `make llama-server` unpack "
                "it under SPECDEC_CACHE/llama-server/src")
    if importlib.util.find_spec("sentencepiece") is None:
        return "llama.cpp's converter needs sentencepiece: pip install 'sentencepiece>=0.1.98,<0.3.0'"
    return None


def start_servers(binary: Path, *flags: tuple[str, ...]) -> list[tuple[subprocess.Popen, str]]:
    """One llama-server per flag set, started together, each with the project's GGUF target on a free
    loopback port, one thread, /metrics on; returned once all are healthy (all stopped if one fails)."""
    import httpx

    from specdec_core.models import gguf_path

    servers = []
    for extra in flags:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([str(binary), "-m", str(gguf_path()), "--host", "127.0.0.1", "--port", str(port), "-t", "1",
                                 "-c", "2048", "-np", "1", "--metrics", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        servers.append((proc, f"http://127.0.0.1:{port}"))
    deadline, waiting = time.time() + 60, list(zip(servers, flags))
    try:
        while waiting:
            if time.time() > deadline:
                raise RuntimeError("llama-server did not become healthy in 60 s")
            (proc, url), extra = waiting[0]
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode} (flags {extra})")
            try:
                if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                    waiting.pop(0)
                    continue
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    except BaseException:
        stop(servers)
        raise
    return servers


def stop(servers: list[tuple[subprocess.Popen, str]]) -> None:
    for proc, _ in servers:
        proc.terminate()
    for proc, _ in servers:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.llama_server
@pytest.mark.skipif(why_not_llama_cpp() is not None, reason=str(why_not_llama_cpp()))
def test_llama_server_accepts_the_exported_drafts(exported, tmp_path, capsys):
    from gguf import GGUFReader

    from specdec_core.cli import main
    from specdec_core.suite import PROMPTS_DIR

    binary = llama_server_binary()
    if "draft-eagle3" not in subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout:
        pytest.skip("this llama-server has no --spec-type draft-eagle3")
    draft = eagle3.convert_to_gguf(exported, tmp_path / "draft.gguf", llama_cpp_src())
    reader = GGUFReader(draft)
    fields = {name: f for name, f in reader.fields.items()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "eagle3"
    assert [int(fields["eagle3.target_layers"].parts[i][0]) for i in fields["eagle3.target_layers"].data] == [2, 15, 27]
    d2t = next(t for t in reader.tensors if t.name == "d2t")
    net = load_module("smollm2-135m", "eagle", EagleNet)
    assert torch.equal(torch.from_numpy(d2t.data.copy()).long(), net.vocab_ids.long())  # absolute ids after conversion

    # Two short prompts of the suite, a chat and a code one: this drafter's alpha at 32 tokens there is
    # 0.16 and 0.21 (llama-server, 2026-12); over the suite's first 16 prompts 0.08, as in the lab.
    lines = [l for l in (PROMPTS_DIR / "suite.jsonl").read_text().splitlines(keepends=True)
             if '"chat-02"' in l or '"code_edit-01"' in l]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(lines))
    servers = start_servers(binary, (), ("-md", str(draft), "--spec-type", "draft-eagle3", "--spec-draft-n-max", "4"))
    (_, plain_url), (_, spec_url) = servers
    try:
        out = tmp_path / "llama.json"
        assert main(["bench", "--endpoint", spec_url, "--baseline-endpoint", plain_url, "--prompts", str(prompts),
                     "--max-new-tokens", "32", "--out", str(out)]) == 0, capsys.readouterr().err
    finally:
        stop(servers)
    report = json.loads(out.read_text())
    s = report["summary"]["endpoint"]["speculative"]
    assert s["num_draft_tokens"] > 0 and s["draft_acceptance_rate"] > 0.1, s
    texts: dict[str, dict[str, str]] = {}
    for row in report["results"]:
        assert row["ok"] and row["new_tokens"] > 0
        texts.setdefault(row["prompt_id"], {})[row["endpoint"]] = row["text"]
    assert len(texts) == len(lines) and all(len(set(t.values())) == 1 and len(t) == 2 for t in texts.values()), texts
