"""A logging or print call inside compiled code, which breaks the graph: whether Dynamo can reorder it past
the graph (its arguments), and the exact setting that skips a logger's call."""

from __future__ import annotations

import re

from tpu_lab.compile.sources.dynamo_catalog import unresolved_names

_ARG_TYPES = re.compile(r"argument types \[([^\]]*)\] \(has_kwargs (\w+)\)")
_REORDERABLE = {"Tensor", "Parameter", "str", "int", "float", "bool", "NoneType", "complex"}
LOGGING_FIX = (
    "print outside the compiled function (before or after the call), or only while not compiling: "
    "if not torch.compiler.is_compiling(): print(...) (Dynamo drops it from the graph; it runs when called eagerly)"
)


def reorderable(reason: str) -> bool:
    """Dynamo reorders a logging call past the graph only when every argument is a tensor, a constant or a
    string formatter, without keywords (``can_reorder_logs``): a ``torch.Size`` or another object still breaks."""
    m = _ARG_TYPES.search(reason)
    if m is None:
        return "can't actually be reordered" not in reason
    types = {t.strip().strip("'\"") for t in m[1].split(",") if t.strip()}
    return m[2] == "False" and types <= _REORDERABLE


LOGGER_CALL = re.compile(r"method: <Logger (?P<name>\S+) \(\w+\)>\.(?P<method>\w+)")


def logger_words(name: str, method: str) -> tuple[str, str]:
    """A call on a ``logging.Logger`` (transformers' ``logger.warning_once``) as words, and the exact
    setting that skips it, naming the logger as ``logging.getLogger`` returns it (the same object)."""
    words = f"a logging call (logger {name!r}, .{method}) cannot go into a graph: Dynamo breaks the graph there"
    fix = (
        f"torch._dynamo.config.ignore_logging_functions.add(logging.getLogger({name!r}).{method}) before the first "
        "call: Dynamo then skips that call while compiling (the message is not logged from compiled code); or "
        "log outside the compiled function"
    )
    return words, fix if not unresolved_names(fix) else LOGGING_FIX


_LOGGING_HINT = re.compile(r"attempting to call a logging function \(e\.g\. `(?P<name>[\w.]+)`\)")


def reorder_fix(reason: str, code: str) -> str:
    """Dynamo's hint that a builtin it skips is a logging call (``_warnings.warn``) as the exact setting, by
    the name the user calls (``warnings.warn``); '' where the hint is absent or the call on the user's line
    ``code`` cannot move (Dynamo moves only calls without keyword arguments whose arguments are tensors, numbers or
    strings: ``stacklevel=2`` or a ``FutureWarning`` stops it), or where that line makes no such call."""
    m = _LOGGING_HINT.search(reason)
    # a keyword (stacklevel=2) or a class among the arguments (FutureWarning) stops Dynamo moving the call
    if m is None or not reorderable(reason) or re.search(r",\s*\w+\s*=(?!=)|,\s*[A-Z]\w*(?:Warning|Error)\b", code):
        return ""
    if not re.search(rf"\b{re.escape(m['name'].rsplit('.', 1)[-1])}\(", code):  # logged at another line (a loop's
        return ""  # next pass, resumed after a break): the call's own arguments are not known here
    name = re.sub(r"^_warnings\.", "warnings.", m["name"])
    fix = (
        f"torch._dynamo.config.reorderable_logging_functions.add({name}) before the first call: Dynamo then "
        "makes the call after the graph instead of breaking it there (where its arguments are tensors, numbers "
        "or strings); or call it outside the compiled function"
    )
    return "" if unresolved_names(fix) else fix
