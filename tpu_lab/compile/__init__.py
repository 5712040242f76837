"""compile: counting compilations and bounding them. ``sources`` reads compile counts (Dynamo's records,
torch_tpu's cache counters); ``signature``, ``explain`` and ``tally`` turn them into per-shape rows with
the cause in words; ``table`` renders them (text, HTML, ``chart``); ``buckets`` picks shape buckets;
``session`` (with ``hooks`` and ``record``) is the GenerationSession that generates with bounded shapes.

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never models, tp or widgets.
"""
