"""A compile Dynamo gave up on (its record has ``fail_type`` and no guarded code), in words: a first
compile means the function runs eagerly on every call; a recompile, that calls matching no compiled graph
run eagerly from now on; under ``fullgraph=True`` the call raised."""

from __future__ import annotations

import dataclasses
import linecache
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tpu_lab.compile.causes.backend_failures import backend_told
from tpu_lab.compile.causes.branch_origin import enclosing_loop
from tpu_lab.compile.causes.break_words import graph_break_words
from tpu_lab.compile.causes.cause import SKIPPED_LATER, Cause, as_logged, local_name, without_fullgraph_hint
from tpu_lab.compile.causes.legacy_constructors import typed_rejected
from tpu_lab.compile.causes.library_breaks import LIBRARY_COMPILED
from tpu_lab.compile.causes.numpy_values import numpy_emulated, numpy_inputs_read_back
from tpu_lab.compile.causes.operator_failures import fake_fix, operator_fix, operator_words
from tpu_lab.compile.causes.source_file import enclosing_lines, whole_statement
from tpu_lab.compile.sources import frames, stack_place
from tpu_lab.compile.sources.dynamo_catalog import internal_error
from tpu_lab.compile.sources.dynamo_failures import FailureTrace, failure_of
from tpu_lab.compile.sources.frames import RESUME, Capture
from tpu_lab.compile.sources.packages import is_library, package_of, short_path
from tpu_lab.compile.watching.cannot_resume import cannot_resume

# Dynamo then runs the code eagerly (Unsupported and UserError are its "soft" failures, never re-raised)
_FALLS_BACK = ("Unsupported", "UserError", "SkipFrame", "SkipCodeRecursiveException")


def _suppressed(record: Any) -> bool:
    """suppress_errors: every failure falls back to eager; as the compile's own record says (a log read
    later: that job's setting), else this process's config."""
    said = getattr(record, "config_suppress_errors", None)
    if isinstance(said, bool):
        return said
    import torch._dynamo.config as config

    return bool(getattr(config, "suppress_errors", False))


class FailedCompile(NamedTuple):
    words: str
    guard: str
    fix: str
    cause: Cause
    """Dynamo's reason in words (the break that stopped it, from its registry)."""
    break_at: str
    """Where Dynamo logs it as a graph break too (TORCH_LOGS=graph_breaks), else ''."""
    raises: bool = False
    """The call raised (fullgraph's refusal, an error Dynamo re-raises) instead of running eagerly."""


def failed_compile(
    cap: Capture, record: Any, recompile: Sequence[Cause], breaks_at: Mapping[str, Cause] | None = None
) -> FailedCompile:
    """``recompile``: the causes of the recompile that failed (none for a first compile); ``breaks_at``: the
    latest graph break heard at each place (``file:line``)."""
    reason = str(getattr(record, "fail_reason", "") or getattr(record, "fail_type", "") or "")
    file = getattr(record, "fail_user_frame_filename", None) or ""
    line = int(getattr(record, "fail_user_frame_lineno", 0) or 0)
    library = f"{short_path(file)}:{line}" if file and is_library(file) else ""  # no edit to ask for there
    trace = failure_of(str(getattr(record, "compile_id", "") or cap.compile_id))
    if trace is not None and trace.stack:  # the record keeps the innermost frame only: the user's line is above it
        file, line, library = stack_place.break_location(trace.stack)
        calls, builtin = stack_place.stand_in_call(trace.stack, cap.function.filename, cap.function.line)
        if calls:  # met inside Dynamo's own stand-in for a builtin the function's line calls: that line
            file, line, library = cap.function.filename, calls, f"{_STAND_IN}{builtin}"
    reason = _with_root(reason, trace)
    if not file and reason.startswith("Backend compiler") and cap.function.filename:  # no frame: the graph's own
        file, line = cap.function.filename, cap.function.line
    no_fake = _NO_FAKE.search(reason)  # the user's own custom op: where torch's dispatcher raised says nothing
    library = "" if no_fake else library
    code = linecache.getline(file, line).strip() if file else ""
    cause = graph_break_words(reason, library, code, (file, line) if file else (cap.function.filename, 0))
    cause = numpy_inputs_read_back(
        _through(cause, stack_place.called_through(trace.stack) if trace else "", reason), cap.shown
    )
    cause = numpy_emulated(cause, reason, enclosing_lines(file, line)) if file else cause
    where = frames.where_label(file, line) if file and not is_library(file) else ""
    at = f" at {where}" + (f" ({whole_statement(code)})" if whole_statement(code) else "") if where else ""
    at += _in_loop(reason, file, line)
    name = _frame_named(cap.function)
    cause, placed = backend_told(cause, reason, trace.value_sized if trace else ("", 0, ""), name)
    at = "" if placed else at  # the words say where
    if not reason:  # no error: the frame traced no tensor operation, and Dynamo skips it from now on
        changed = "; ".join(re.sub(r"\s*\([^()]*\)$", "", c.words) for c in recompile)  # a recompile's, asides cut
        words = (
            f"not compiled: Dynamo found no tensor operation to trace in {name} (on these inputs"
            + (f": {changed}" if changed else "")
            + ") and skipped "
            "it: it runs eagerly from now on, for every input"
        )
        fix = (
            f"none needed if {name} really has no tensor work; else make sure its inputs hold tensors at the first call"
            if not is_library(cap.function.filename)
            else f"none needed: {package_of(cap.function.filename)}'s own code, with no tensor work here, runs eagerly"
        )
        if cap.function.resumes_at and not is_library(cap.function.filename):  # the rest after a break: a return
            fix = f"none needed: what is left of {name} has no tensor work (it returns, or does Python bookkeeping)"
        elif recompile and not is_library(cap.function.filename):  # compiled before: on other inputs it has work
            fix = SKIPPED_LATER.format(name)
        return FailedCompile(words, "\n".join(c.guard for c in recompile if c.guard), fix, cause, "")
    kind = str(getattr(record, "fail_type", "") or "")
    if not library.startswith(_STAND_IN):  # inside Dynamo's stand-in for a builtin: told as such below
        cause = cannot_resume(cause, reason, cap.compile_id, (file, line), (breaks_at or {}).get(where))
    if kind not in _FALLS_BACK and internal_error(kind):  # Dynamo's own bug, whatever the code or fullgraph
        return _internal(cap, record, kind, reason, where or library, recompile)
    if cap.fullgraph:
        words = (
            f"refused: torch.compile(fullgraph=True) allows no graph break, and {name} has one{at} "
            f"({cause.words}); the call raised"
        )
    elif kind not in _FALLS_BACK and not _suppressed(record) and (marked := _marked_but_static(reason, cap)):
        user, dim, size, fixed_at = marked
        words = (
            f"compile of {name} failed: {user} dimension {dim} was marked dynamic (mark_dynamic), but the code "
            f"fixes it at {size}{fixed_at}; the call raised {kind}"
        )
        fix = (
            f"remove the mark_dynamic on {user}, or use torch._dynamo.maybe_mark_dynamic({user}, {dim}): dynamic "
            "only where the code allows it"
        )
        return FailedCompile(words, "", fix, cause, "", raises=True)
    elif kind not in _FALLS_BACK and not _suppressed(record):  # an error, not a break: Dynamo re-raises it
        after = f" after {'; '.join(c.words for c in recompile)}" if recompile else ""
        inside = operator_words(trace.operator) if trace else ""
        words = f"compile of {name} failed{at}{after}: {cause.words}{inside}; the call raised {kind}"
        fix = cause.fix if cause.fix and "accept the break" not in cause.fix else ""  # an error: no break to accept
        fix = operator_fix(trace.operator if trace else "", reason) or fix
        fix = fake_fix(no_fake[1]) if no_fake else fix
        fix = fix or (_TRANSFORM_FIX if library.startswith("torch/_functorch/") else "")
        fix = fix or "fix the error the call raised (its message names what Dynamo could not compile)"
        if typed := typed_rejected(cause.words, code):  # torch.FloatTensor(a float64 array): fine eagerly only
            words, fix = f"compile of {name} failed{at}{after}: {typed[0]}; the call raised {kind}", typed[1]
        return FailedCompile(words, "\n".join(c.guard for c in recompile if c.guard), fix, cause, "", raises=True)
    elif recompile:
        words = (
            f"recompile failed{at} ({cause.words}) after {'; '.join(c.words for c in recompile)}: no graph "
            f"for these inputs, and Dynamo gave up on {name}: from now on every call of it runs eagerly, calls "
            "its earlier graphs matched included"
        )
    elif (reached := getattr(record, "reached_from", ("", 0)))[0] and is_library(cap.function.filename):
        words = (
            f"not compiled: Dynamo gave up on {name}{at}: {cause.words}; it runs eagerly, as the code around it does"
        )
        call = whole_statement(linecache.getline(reached[0], reached[1]).strip())
        fix = f"none needed: library code, met while your line {frames.where_label(*reached)} ({call}) ran eagerly"
        return FailedCompile(words, "", fix, cause, "")
    else:
        eager = "it runs eagerly on every call"
        if _in_loop(reason, file, line) and cap.function.resumes_at:  # the part after the break, loop included
            fn = cap.function.label.split(" after ")[0]
            eager += f": {fn} from line {cap.function.resumes_at} on, the loop included"
        words = f"not compiled: Dynamo gave up on {name}{at}: {cause.words}{_in_with(trace, cap)}; {eager}"
    fix = cause.fix
    if not cap.fullgraph:  # Dynamo's hint to set fullgraph=False: it is False already, the code ran eagerly
        fix = without_fullgraph_hint(fix)
    fix = fix or f"move what Dynamo cannot trace out of {name} (or into a torch.compiler.disable'd helper)"
    if library.startswith(_STAND_IN) and not recompile:  # nothing of Dynamo's to change: keep Dynamo out of it
        fix = (
            f"decorate {cap.function.name.rsplit('.', 1)[-1]} with @torch.compiler.disable: it runs eagerly as now, and "
            "what it calls (a key function, a lambda) is no longer compiled on its own, a graph per value; or call it "
            "outside the compiled function"
        )
        cause = dataclasses.replace(cause, fix=fix)  # its graph break says the same
    if library and not recompile and is_library(cap.function.filename) and not stack_place.calling_library(cap.callers):
        fix = LIBRARY_COMPILED.format(name=name, package=package_of(cap.function.filename))  # the user compiled it
    guard = "\n".join(c.guard for c in recompile if c.guard)  # Dynamo's guards only; its reason is in the words
    # Dynamo logs an unsupported construct as a graph break (not an error inside an op, nor fullgraph's raise)
    logged = getattr(record, "fail_type", "") in ("Unsupported", "UserError") and not cap.fullgraph
    logged = logged and getattr(record, "logged_as_break", True)  # not a function Dynamo would not start on
    break_at = (where or f"{short_path(file)}:{line}") if logged and file else ""
    if logged and not file and cap.function.filename:  # a backend's failure: Dynamo logs it at the function
        break_at = frames.where_label(cap.function.filename, cap.function.line)
    return FailedCompile(
        words, guard, fix, cause if cap.fullgraph else as_logged(cause), break_at, raises=cap.fullgraph
    )


_STAND_IN = "Dynamo's own stand-in for "  # a polyfill: Dynamo's code for a builtin (itertools.permutations)


def _frame_named(fn: frames.FunctionKey) -> str:
    """The frame Dynamo gave up on, a decorator's wrapper named as such: the function inside it compiles as
    a frame of its own (a row of its own), so only the wrapper runs eagerly."""
    if not fn.via or fn.via.startswith("torch."):
        return fn.label
    wrapper = f"the {fn.wrapper} wrapper" if fn.wrapper.startswith("@") else fn.wrapper  # or Module's wrapper
    return f"{wrapper} of {fn.label}"


def _internal(cap: Capture, record: Any, kind: str, reason: str, at: str, recompile: Sequence[Cause]) -> FailedCompile:
    """Dynamo failed on its own error (it raised InternalTorchDynamoError): nothing in the code to change
    but where it compiles; the call raised, unless suppress_errors ran it eagerly."""
    name, first = cap.function.label, reason.strip().splitlines()[0] if reason.strip() else kind
    short = first if kind == "InternalTorchDynamoError" or first.startswith(kind) else f"{kind}: {first}"
    short = short if len(short) <= 120 else short[:117] + "..."
    after = f" after {'; '.join(c.words for c in recompile)}" if recompile else ""
    words = f"Dynamo failed internally ({short}) compiling {name}{f' at {at}' if at else ''}{after}: an error in Dynamo"
    if _suppressed(record):
        words += f" itself; suppress_errors is on, so {name} runs eagerly on these inputs from now on"
    else:
        words += (
            f" itself; the call raised InternalTorchDynamoError, and so does every call of {name} that needs a new graph "
            "(nothing runs eagerly unless torch._dynamo.config.suppress_errors = True)"
        )
    line = f"the line{f' at {at}' if at else ''}"
    where = (  # a resumed part is Dynamo's own function: only the line is the user's to wrap
        f"move {line} into a function of its own wrapped"
        if cap.function.name.startswith(RESUME)
        else f"wrap {name} (or {line})"
    )
    fix = (
        f"{where} in torch.compiler.disable so it runs eagerly, and report it to PyTorch "
        "(https://github.com/pytorch/pytorch/issues) with the stack TORCHDYNAMO_VERBOSE=1 prints"
    )
    if recompile:  # the error came with a new graph: what changed may have no need to be in one
        fix += (
            "; this was a recompile: where what changed need not enter the graph (a clock reading, a counter), "
            "keep it out of the compiled function and no new graph is compiled"
        )
    guard = "\n".join(c.guard for c in recompile if c.guard)
    return FailedCompile(words, guard, fix, Cause("internal", words), "", raises=not _suppressed(record))


_TRANSFORM_FIX = (  # a compiled function passed into an eager transform is not compiled either (Unsupported)
    "run this function uncompiled: Dynamo failed inside torch.func's transform (vmap, grad, jacrev, hessian) at "
    "this line, and compiling the function the transform takes instead does not help (Dynamo does not compile "
    "it inside an eager transform)"
)

_NO_FAKE = re.compile(r"Please use `([\w.]+)\.register_fake`")
_MARKED = re.compile(
    r"You marked (?P<source>\S+?)\.size\(\)\[(?P<dim>\d+)\] as dynamic but your code specialized it to be a constant \((?P<size>\d+)\)"
)


def _marked_but_static(reason: str, cap: Capture) -> tuple[str, str, str, str] | None:
    """Dynamo's ConstraintViolationError for a dimension marked dynamic that the code fixes (vmap's batch,
    a size used as a Python int): (the input by the user's name, the dimension, the size it is fixed at, and
    `` at line N (code)``: the user's line that fixes it, the last of the user stack Dynamo attaches)."""
    m = _MARKED.search(reason)
    if m is None:
        return None
    first = re.split(r"\n\s*- You marked|User stack:", reason.partition("User stack:")[2])[0]  # the mark named
    stack = stack_place.user_lines(first)
    fixed_at = ""
    if stack:
        code = linecache.getline(stack[-1][0], stack[-1][1]).strip().rstrip(":")  # a loop header without its colon
        fixed_at = f" at {frames.where_label(*stack[-1])}" + (f" ({code})" if code else "")
    return frames.renamed(local_name(m["source"]), cap.names), m["dim"], m["size"], fixed_at


_LOOP = "graph break in loop"
_NESTED = "*** While handling this graph break, another graph break occurred: ***"


def _with_root(reason: str, trace: FailureTrace | None) -> str:
    """A "graph break in loop" record that lost the break behind it (capture_scalar_outputs=True: an error,
    not a break, raised it) with that error put back as the inner break, as Dynamo words the nested case."""
    if trace is None or len(trace.chain) < 2 or _NESTED in reason or not reason.startswith(_LOOP):
        return reason
    return f"{trace.chain[-1]}\n\n{_NESTED}\n\n{reason}"


_DUNDER = {"__getitem__": "indexes", "__setitem__": "stores by index", "__iter__": "iterates over", "__len__": "sizes"}
_NEEDS_NUMBER = ("Tensor.item()", "_local_scalar_dense", "data-dependent expression")


def _through(cause: Cause, called: str, reason: str) -> Cause:
    """A failure reached through the container protocol (``self.experts[e]`` -> ``__getitem__``) that needs a
    tensor's value as a Python number: the user's line uses a tensor where the container needs an int."""
    if called not in _DUNDER or not any(n in reason for n in _NEEDS_NUMBER):
        return cause
    words = (
        f"your line {_DUNDER[called]} a container with a tensor (e.g. one element of a tensor it loops over): the "
        "container needs its value as a Python int, read from the tensor's data, which Dynamo cannot know while "
        "tracing" + ("" if "read from tensor data" in cause.words else f"; Dynamo's words: {cause.words}")
    )  # ours (symbolic_numbers) say the same as the line above: Dynamo's sympy text is not repeated
    fix = (
        "index with a Python int, not a tensor: loop over the container itself (for i, m in enumerate(...)) "
        "and pick each one's rows with a mask that keeps shapes fixed (torch.where), or move the loop into a "
        "torch.compiler.disable'd helper; capture_scalar_outputs=True only moves the failure to the index check"
    )
    return dataclasses.replace(cause, words=words, fix=fix)


def _in_loop(reason: str, file: str, line: int) -> str:
    """Where the failure is inside a loop Dynamo cannot resume in: the innermost for/while of the user's file
    around the failing line (Dynamo's record names the frame it skipped, not the loop)."""
    if _LOOP not in reason:
        return ""
    number, code = enclosing_loop(file, line)
    if not number:
        return ""
    return f", inside the loop at line {number}" + (f" ({whole_statement(code)})" if whole_statement(code) else "")


def _in_with(trace: FailureTrace | None, cap: Capture) -> str:
    """Why all of the function, where the break sits inside the context manager a ``with`` line of the compiled
    function enters (a @contextmanager timer): Dynamo cannot split a function there, so it gives up on it whole."""
    name = cap.function.name.rsplit(".", 1)[-1]
    own = [f for f in trace.stack if f.filename == cap.function.filename and f.name == name] if trace else []
    if not own or trace is None or own[-1] is trace.stack[-1]:
        return ""
    code = linecache.getline(own[-1].filename, own[-1].lineno or 0).strip()
    if not code.startswith(("with ", "async with ")):
        return ""
    return (
        f", inside the context manager line {own[-1].lineno} enters ({code}): Dynamo cannot split a function "
        "inside a with statement's context manager, so it gave up on all of it"
    )
