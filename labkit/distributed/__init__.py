"""Distributed decode: the tiny GPT split over ranks by tensor parallelism (:mod:`.tp`) and the
launcher that runs a function on ``N`` ranks (:mod:`.launch`). Measured by
:mod:`labkit.measure.tp`."""
