"""compile: counting compilations and bounding them. ``sources`` reads compile counts (Dynamo's records,
torch_tpu's cache counters); ``signature``, ``explain`` and ``tally`` turn them into per-shape rows with
the cause in words; ``table`` renders them (text, HTML, ``chart``); ``buckets`` pads to shape buckets
and compares policies, ``advice`` finds the buckets that pad least (1-D and batch x length), ``policies``
is the panel's menu; ``session`` (with ``hooks``, ``batching`` and ``record``) is the GenerationSession
that generates single prompts and batches with bounded shapes.

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never models, tp or widgets.
"""
