"""host: what this machine and this process are. The only code that reads ``/sys``, ``/dev`` and
``/proc`` (every root injectable): the TPU chip scan and rank-count rule (``chips``), memory
(``memory``), the process table (``processes``), installed versions (``versions``), and the probe
with its findings and device choice (``probe``).

May import: ``tpu_lab.errors``, ``tpu_lab._report``, ``tpu_lab._checks``. Never models, compile, tp or widgets.
"""
