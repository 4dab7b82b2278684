"""Training drafters offline, in the order a run goes:

`templates.py` (the training prompts' templates and fillers: data) → `prompts.py` (the training prompts
they expand to, in a seeded order) → `contamination.py` (their check against the eval prompts) →
`data.py` (`make-data`: the target's own answers with its hidden states, in safetensors shards) →
`vocab.py` (the reduced output vocabulary, chosen by measurement) → `batches.py` (sequences as padded
batches, aligned by anchor) → `objectives.py` (what each drafter kind computes, the distillation loss,
offline acceptance) → `train.py` (`train-draft` with checkpoints and resume, `eval-draft`, export of
weights and model card) → `commands.py` (the `make-data`, `train-draft`, `train-curve`, `eval-draft` and
`tree-shape` commands: their options and handlers).
"""
