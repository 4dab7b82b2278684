"""Training drafters offline: the self-distillation data (`make-data`) first.

`prompts.py` (the training prompts and their contamination check against the eval prompts) →
`data.py` (the target's own answers with its hidden states, in safetensors shards) → `cli.py`.
"""
