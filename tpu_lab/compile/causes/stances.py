"""What a compiler stance set with ``torch.compiler.set_stance`` did to the calls a watch saw, in words: the
calls it ran eagerly or made raise leave no record in Dynamo, so these lines are the only trace of them."""

from __future__ import annotations

from tpu_lab.compile.sources.dynamo_stance import DEFAULT, StanceSet

_DOES = {
    "eager_on_recompile": "a call that needed a new graph ran eagerly instead, every time, and Dynamo keeps no "
    "record of such calls, so they are not in this table",
    "fail_on_recompile": 'a call that needed a new graph raised RuntimeError ("Detected recompile when '
    "torch.compile stance is 'fail_on_recompile'\") instead of compiling; such calls are not in this table",
    "force_eager": "every compiled function ran eagerly: nothing compiled, and such calls are not in this table",
    "eager_then_compile": "the first call of each compiled function ran eagerly, uncompiled; the second compiled, "
    "with the sizes that differed between the two made dynamic",
    "aot_eager_then_compile": "the first call of each compiled function compiled with the aot_eager backend; the "
    "second compiled with torch.compile's own backend, with the sizes that differed between the two made dynamic",
}


def stance_words(s: StanceSet) -> str:
    """``torch.compiler.set_stance("eager_on_recompile") at train.py:30 was in force: ...``."""
    said = f'set_stance("{s.stance}")' if s.stance != DEFAULT else f'set_stance(force_backend="{s.backend}")'
    where = f" at {s.where}" if s.where else ", set before this watch,"
    if s.stance == DEFAULT:
        does = f"every compile used the {s.backend} backend, not the one torch.compile was given"
    else:
        does = _DOES.get(s.stance, "calls ran as that stance says (a stance this torch has and tpu_lab does not know)")
    return f"torch.compiler.{said}{where} was in force during this watch: while it was, {does}"
