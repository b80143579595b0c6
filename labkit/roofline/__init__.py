"""The roofline probes of notebook 12: what a step must move (:mod:`.stepcost`), several steps in
one graph (:mod:`.multistep`) and what this PyTorch offers of conditional nodes
(:mod:`.conditional`). Measured by :mod:`labkit.measure.roofline`."""
