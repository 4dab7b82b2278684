"""The acceptance & speedup lab's helpers (the page itself is views/lab.py, registered like every page):

- `prompts`: the lab's prompts by category (the quick set, or built-ins when it is missing);
- `survival`: per-position survival s_i pooled over runs, and the α fitted to the same steps;
- `trees`: τ and speed against tree size (chain, static, dynamic) beside the measured cost curve;
- `curve`: the shipped scaling curve (first-draft acceptance against training data);
- `calibration`: the block drafter's shipped calibration report and its τ beside eagle's.
"""
