"""Serving on the tiny GPT: continuous batching over a request trace (:mod:`.loop`), the
request traces it replays (:mod:`.traces`) and speculative decoding's host side
(:mod:`.spec`). Built on the decode engine; measured by :mod:`labkit.measure.serve`."""
