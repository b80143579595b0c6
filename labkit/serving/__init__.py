"""Serving on the tiny GPT: continuous batching over a request trace (:mod:`.loop`) and the
request traces it replays (:mod:`.traces`). Built on the decode engine; measured by
:mod:`labkit.measure.serve`."""
