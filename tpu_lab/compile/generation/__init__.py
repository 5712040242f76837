"""The generation session: ``session`` (with ``session_checks``, ``hooks`` and ``batching``) generates
with bounded shapes; ``generation_record`` is one call's record; ``signature``, ``tally`` and ``table``
are its per-shape rows, ``shape_reasons`` says why a shape compiled."""
