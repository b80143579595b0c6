"""Plumbing under the engine: the hardware tier and environment record (:mod:`.env`), the
``LABKIT_*`` variables (:mod:`.envvars`), where files are (:mod:`.paths`)
and the byte tokenizer with its corpus (:mod:`.corpus`)."""
