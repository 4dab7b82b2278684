"""A static draft tree, measured (Medusa): how often head d's rank-r guess is the target's token.

Medusa fixes its tree once, from calibration data: the rank paths (r_1, ..., r_d) whose product of
per-depth accuracies acc[d][r] is highest (`trees.static_shape`). Here acc is measured teacher-forced on
the corpus's held-out split — the data `eval-draft` scores, never the evaluation suite — at every anchor:
the target's greedy token d places ahead against the rank it has in head d's distribution. The table is
shipped beside the weights (`heads.tree.json`) with their SHA-256, so retrained heads refuse a stale one.
"""
from __future__ import annotations

import torch
from tqdm import tqdm

from ..drafters import MedusaHeads, module_vocab
from ..drafters.weights import drafter_module, save_rank_accuracy
from ..models import LoadedModel
from .batches import load_splits, make_batch
from .corpus import Corpus
from .objectives import heads_logits

RANKS = 8  # Medusa's published trees use each head's top 10 at most; on a CPU the trees are smaller


@torch.inference_mode()
def rank_accuracy(lm: LoadedModel, corpus: Corpus, ranks: int = RANKS, limit: int = 0) -> dict:
    """acc[d][r] on the held-out split (its first `limit` sequences; 0: all) and the anchors behind each depth."""
    heads = drafter_module(lm, "heads", MedusaHeads)
    vocab = module_vocab(heads, lm.model.lm_head.weight)
    final = lm.model.config.num_hidden_layers
    depth = heads.config["heads"]
    _, heldout = load_splits(lm, corpus, (final,), mode="online")  # features computed for the held-out split only
    heldout = heldout[:limit] if limit else heldout
    hits = torch.zeros(depth, ranks)
    anchors = torch.zeros(depth)
    for sequence in tqdm(heldout, desc="tree-shape", unit="seq"):
        batch = make_batch([sequence])
        logits = heads_logits(heads, vocab, batch, final, depth)[:, 0]  # (D, n, N)
        choice = vocab.index[torch.argmax(lm.model.lm_head(batch.hidden[final][0]), dim=-1)]  # (n,) -1: outside
        n = sequence.rows
        for d in range(1, depth + 1):  # head d at anchor m guesses the target's token at row m + d
            if n <= d:
                break
            truth = choice[d:n]  # (n - d,)
            rows = logits[d - 1, :n - d]  # (n - d, N)
            inside = truth >= 0
            score = rows.gather(1, truth.clamp(min=0)[:, None])  # the true token's logit
            rank = (rows > score).sum(-1)[inside]  # 0 = head d's best guess
            hits[d - 1] += torch.bincount(rank[rank < ranks], minlength=ranks).float()
            anchors[d - 1] += n - d
    accuracy = (hits / anchors.clamp(min=1)[:, None]).tolist()
    return {"rank_accuracy": [[round(a, 5) for a in row] for row in accuracy], "anchors": anchors.long().tolist(),
            "sequences": len(heldout), "data": corpus.folder.name, "shards": len(corpus.manifest["shards"])}


def measure_and_record(lm: LoadedModel, corpus: Corpus, ranks: int = RANKS, limit: int = 0) -> dict:
    """Measure the heads' table and ship it beside their weights (`drafters/weights.save_rank_accuracy`)."""
    table = rank_accuracy(lm, corpus, ranks, limit)
    save_rank_accuracy(lm.name, "heads", table)
    return table
