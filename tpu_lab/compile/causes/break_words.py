"""A graph break (or a compile Dynamo gave up on) in words, from Dynamo's graph-break registry: its explanation,
cleaned of addresses and paths, and only hints whose API and config names exist in torch. Text in, a Cause out."""

from __future__ import annotations

import dataclasses
import itertools
import re

from tpu_lab.compile.causes import library_breaks as lib
from tpu_lab.compile.causes import read_back_use as use
from tpu_lab.compile.causes.branch_origin import (
    CHECK_FIX,
    NUMPY_SAID,
    RANDOM_BRANCH_FIX,
    RANDOM_LOOP_FIX,
    branch_origin,
    drawn_fixes,
    drawn_value_fix,
    enclosing_loop,
    numpy_branch,
    only_raises,
    tensor_drawn,
)
from tpu_lab.compile.causes.cause import SPARSE_FIX, Cause
from tpu_lab.compile.causes.legacy_constructors import legacy_fix, legacy_said, sized_typed
from tpu_lab.compile.causes.logging_breaks import LOGGER_CALL, LOGGING_FIX, logger_words, reorder_fix, reorderable
from tpu_lab.compile.causes.numpy_values import NUMPY_FIX, numpy_missing, numpy_on_numbers
from tpu_lab.compile.causes.random_draws import drawn_by, draws_random, read_back_at, read_back_origin
from tpu_lab.compile.causes.resumed import carried_call
from tpu_lab.compile.causes.rnn_breaks import with_rnn_cost
from tpu_lab.compile.causes.shape_ops import SHAPED, SIZES_FIX, shape_op_said, sized_here, sizes_set_by
from tpu_lab.compile.causes.symbolic_numbers import python_int_fix, python_result, symbolic_number
from tpu_lab.compile.causes.whole_breaks import constructor_words, numpy_number, told_whole
from tpu_lab.compile.sources.dynamo_catalog import break_type, unresolved_names
from tpu_lab.compile.sources.packages import short_path

_UNHELPFUL = ("report an issue", "fundamental", "file an issue", "Please report", "may have been caused by an earlier")
_NESTED = "*** While handling this graph break, another graph break occurred: ***"
_REPR = re.compile(
    r"<(?:function|bound method|built-in function|method|class) '?([\w.<>]+?)'?(?: of [^>]*)?(?: at 0x[0-9a-f]+)?>"
)
_ADDRESS = re.compile(r"<([\w.]+) object at 0x[0-9a-f]+>")
_PATH = re.compile(r"(/[^\s:'\"`(),]+\.py)")


def clean(text: str) -> str:
    """Dynamo's text as a user reads it: ``<function log at 0x7f..>`` -> ``log``, absolute paths shortened
    (``transformers/models/llama/modeling_llama.py``), no trailing ``Message: None``."""
    text = re.sub(r"\b[LG]\[['\"]([^'\"]+)['\"]\]", r"\1", text.replace("<locals>.", ""))
    text = re.sub(r"\._(?:modules|parameters|buffers)\['(\w+)'\]", r".\1", text)  # self._modules['lstm']
    text = _REPR.sub(lambda m: m[1].rsplit(".", 1)[-1].removeprefix("<locals>"), text)
    text = _ADDRESS.sub(lambda m: f"a {m[1].rsplit('.', 1)[-1]}", text)
    text = _PATH.sub(lambda m: short_path(m[1]), text)
    text = re.sub(r"\s*Message: None\.?|\s*\(reason: None\)", "", text.replace("\\n", " "))  # an error's repr
    text = re.sub(r"\s*\(unhinted: [^)]*\)\.?\s*(?:\(Size-like symbols: [^)]*\))?", "", text)  # sympy's internals
    text = re.sub(r"\b(\w+) \1\b", r"\1", text)  # Dynamo's doubled words ("numpy numpy function")
    text = re.sub(r"\b(?:this|a) HOP\b", "this higher-order op (a hook, torch.cond or checkpoint body)", text)
    text = _SOURCELESS.sub(_SOURCELESS_WORDS, text)  # Dynamo's builder for objects it has no input path to
    text = numpy_missing(legacy_said(text))  # Variable(t), LongTensor(...): legacy ones, named as written
    return text.strip().rstrip(".")


_SOURCELESS = re.compile(r"SourcelessBuilder\.create does not know how to wrap (\w+)")
_PASSED = " it meets inside a value made outside the compiled code (a generator such as model.parameters() passed in)"
_SOURCELESS_WORDS = rf"Dynamo cannot trace the \1{_PASSED}: it has no input path to guard it by"
_DENSE = re.compile(r"Operator `aten\._local_scalar_dense\.default` has a non-Tensor output[^,;]*?Tensor inputs")
_FX_DUMP = re.compile(r"FakeTensor|\bargs=\(|\bkwargs=\{|\btarget=")
_SETTING = re.compile(r"(?:^|(?<=\. ))(Set torch\.[\w.]+\s*=\s*\w+[^.]*)\.?")


def _advice_in(explanation: str) -> tuple[str, list[str]]:
    """An explanation that carries its own advice (``Set torch._dynamo.config.allow_rnn=True to enable ...``):
    the explanation without it, and the advice as a hint (checked like any hint before it is printed)."""
    advice = [m[1].strip() for m in _SETTING.finditer(explanation)]
    for a in advice:
        explanation = explanation.replace(a, "").strip()
    return explanation.rstrip(" ."), advice


def _sections(text: str) -> tuple[str, str, list[str]]:
    """(the break's type line, its explanation, its hints) from one of Dynamo's break texts."""
    lines = [line.strip() for line in text.strip().splitlines()]
    skip = ("Encountered graph break", "Graph Break Reason", "Failed to handle graph break", "Graph break")
    first = next((line for line in lines if line and not line.startswith(skip)), "")
    backend = re.fullmatch(r"backend='([^']+)' raised:", first)
    if backend and (after := [line for line in lines[lines.index(first) + 1 :] if line]):  # its error next, whole
        raw = itertools.takewhile(lambda ln: ln[:1].strip(), text.strip().splitlines()[lines.index(first) + 1 :])
        first = f"the {backend[1]} backend raised {' '.join(raw).split(' Current state:')[0] or after[0]}"
    explanation = next((ln.split("Explanation:", 1)[1].strip() for ln in lines if ln.startswith("Explanation:")), "")
    hints = [line.split("Hint:", 1)[1].strip() for line in lines if line.startswith("Hint:")]
    return first, explanation, hints


def usable_hints(hints: list[str], reason: str = "") -> list[str]:
    """Dynamo's hints that a user can act on and that name only APIs and config keys this torch has; a hint
    for a case this break is not (``If the HOP is activation checkpointing``, no checkpoint in ``reason``) is
    left out."""
    usable = (h for h in hints if not re.search(r"\{[\w.()\[\]]+\}", h))  # a template Dynamo never filled in
    usable = (h for h in usable if not (h.startswith("If the HOP is") and "checkpoint" not in reason.lower()))
    usable = (h for h in usable if "reorderable_logging_functions" not in h or reorderable(reason))
    return [clean(h) for h in usable if not any(u in h for u in _UNHELPFUL) and not unresolved_names(h)]


_READ_BACK_FIX = (
    "keep the value a tensor: index with torch.index_select or torch.gather instead of a 0-d tensor index, "
    "select with torch.where, or read it with .item() outside the compiled function and pass the number in"
)
_SCOPE_FIX = (
    "a hook (or a torch.cond / checkpoint body) stores into state outside it (an attribute, a global, a list): "
    "return the value instead of storing it, or register that hook outside the compiled call"
)
_AVOID = re.compile(r"Avoid calling `(?:[\w.]+\.)?(\w+)` in your code\.?")
_CONSTRUCTED = re.compile(r"call_method UserDefinedClassVariable\(<class '([\w.]+)'>\) __new__")


def _on_the_line(hint: str, code: str) -> str:
    """Dynamo's "Avoid calling `RandomState.rand` in your code" as something to do; "" when the user's line
    does not make that call (``type.__new__`` from Dynamo's own polyfill for ``RandomState(n)``)."""
    m = _AVOID.fullmatch(hint.strip())
    if m is None or not code:
        return hint
    if not re.search(rf"\b{re.escape(m[1])}\b", code):
        return ""
    name = hint.split("`")[1]
    return f"call `{name}` outside the compiled function and pass its result in (Dynamo cannot trace it)"


_NO_READ_FIX = use.CONTROL_FIX.replace(": capture_scalar_outputs only moves the break there;", ";")  # no .item() here
BRANCH_FIX = f"express the branch with torch.cond, or make it branchless (torch.where, torch.clamp; {use.BOTH_SIDES})"
TRAINING_STEP_FIX = (
    "compile the forward and the loss only (AOTAutograd compiles their backward), and keep loss.backward(), "
    "the optimizer's step and zero_grad, a GradScaler's scale/unscale_/step/update and clip_grad_norm_ outside the compiled function "
    "(a compiled optimizer step is a function of its own: torch.compile(opt.step))"
)


def graph_break_words(
    reason: str, library: str = "", code: str = "", at: tuple[str, int] = ("", 0), stopped_at: int = 0
) -> Cause:
    """A graph break in words (``_break_words``), else, on tpu_lab's own error, Dynamo's first line of it."""
    try:
        return told_whole(reason, library, code, at) or numpy_on_numbers(
            _break_words(reason, library, code, at, stopped_at), code
        )
    except Exception as e:  # a bug here must not end the user's `with tl.watch()` block
        said = f"{clean(_sections(reason)[0] or reason)} (not put in words: {type(e).__name__}: {str(e)[:120]})"
        return Cause("graph_break", said, reason, "")


def _break_words(
    reason: str, library: str = "", code: str = "", at: tuple[str, int] = ("", 0), stopped_at: int = 0
) -> Cause:
    """A graph break in words, with Dynamo's usable hints as the fix. ``library``: file:line where it
    broke when that is library code the user's line calls; then hints that say to edit the code at the
    break are no fix for the user, and the words say where it is. ``code``: the user's line; ``at``: its
    file and line."""
    inner, _, outer = reason.partition(_NESTED)
    first, explanation, hints = _sections(inner)
    found = break_type(inner)
    if "generic_jump" in reason or "Data-dependent branching" in reason:
        branched = "data-dependent branching: an if/while on a tensor's value"
        cause = Cause("data_dependent", branched, first or reason.strip(), BRANCH_FIX)
        line, origin = branch_origin(inner, code, *at)
        if origin:  # Dynamo's own trace of the condition's value, or the random draw that assigns it
            drawn = ", a Python random draw Dynamo passes into the graph as a tensor" if draws_random(origin) else ""
            words = f"{cause.words}, computed from line {line}: {origin}{drawn}"
            fix = (RANDOM_LOOP_FIX if enclosing_loop(*at)[0] else RANDOM_BRANCH_FIX) if drawn else cause.fix
            cause = dataclasses.replace(cause, words=words, fix=fix)  # a draw per layer: LayerDrop's loop fix
        cause = numpy_branch(tensor_drawn(cause, code), inner, code) if not origin else cause
        if (again := use.branched_again(code, *at)) and cause.fix == BRANCH_FIX:  # gamma = ... if ...; if gamma > 0:
            cause = dataclasses.replace(cause, fix=f"{BRANCH_FIX}, {again}")
        cause = dataclasses.replace(cause, fix=CHECK_FIX) if only_raises(*at) else cause  # a check, no branch
    else:
        explanation, advice = _advice_in(explanation)  # "... Set torch._dynamo.config.allow_rnn=True to ..."
        hints = [*hints, *advice]
        words = clean(explanation or (found.explanation if found and "{" not in found.explanation else "") or first)
        words = clean(first) if first and re.fullmatch(r"Dynamo does not support this\.?", words) else words
        if symbolic := symbolic_number(words, code) or python_result(inner, code):  # a symbol where a value is needed
            words, hints = symbolic
        elif len(words) > 200 and _FX_DUMP.search(words):  # an FX node with its fake tensors: the type and error say it
            error = re.search(r"got (\w+)\((['\"])(.+?)\2\)", words)
            words = clean(first) + (f": {error[1]}: {error[3]}" if error else "")
        if found is not None and not hints:
            hints = list(found.hints)
        if re.fullmatch(r"[a-z]+(?:_[a-z]+)+", words or clean(first)):  # an internal name (step_unsupported)
            words = (
                "Dynamo stopped tracing at this instruction and cannot resume inside this function here: it "
                "compiles the function up to the last point it can resume from, and the rest runs eagerly on every call"
            )
        said = "\n".join(line for line in inner.splitlines() if "Hint:" not in line)  # the break, not its hints
        hints = [_on_the_line(h, code) for h in hints]
        fix = "; ".join(h for h in usable_hints(hints, said)[:2] if h) or (
            NUMPY_FIX.format(random=", torch.distributions for random draws" if "random" in inner.lower() else "")
            if "torch._numpy" in inner or "numpy.* functions as methods" in inner  # np.subtract.outer: a ufunc's method
            else ""
        )
        words, fix = numpy_number(inner, code) or (words, fix)  # np.size(a, 0): NumPy traced as torch, a number
        made = _CONSTRUCTED.search(inner)
        if made and "`__new__` of class `type`" in words:  # Dynamo's polyfill calls __new__, the user a class
            words, fix = constructor_words(made[1], code)
        if re.search(r"builtin operator `print`|reorder a debugging function", inner) and not reorderable(inner):
            fix = LOGGING_FIX  # Dynamo's own hints point at reorderable_logging_functions, which refuses these
        if logged := LOGGER_CALL.search(inner):  # Dynamo's hint says "the exact method" but not which
            words, fix = logger_words(logged["name"], logged["method"])
        fix = fix or (_SCOPE_FIX if "outside the scope of this" in inner else "")
        cause = Cause("graph_break", words or clean(first), first, fix)
        unspecialized = "UnspecializedPythonVariable" in inner  # a draw Dynamo made a tensor, met by int arithmetic
        drawn_at, drawn = (
            read_back_origin(inner, code, *at) if "_local_scalar_dense" in inner or unspecialized else (0, "")
        )
        if drawn:  # capture_scalar_outputs would move the break on: the number should not be a tensor at all
            words = f"{cause.words}: the number comes from line {drawn_at}: {drawn}, a {drawn_by(drawn)} random draw Dynamo "
            fix = drawn_value_fix(code, drawn, unspecialized)  # DnCNN's std: a draw normal_ takes as one value
            cause = dataclasses.replace(cause, words=words + "passes into the graph as a tensor", fix=fix)
    skipped = found is not None and "marked as skipped" in found.gb_type  # on purpose, by Dynamo's developers
    if skipped:  # dont_skip_tracing, Dynamo's own hint, forces it in and breaks further inside (GradScaler)
        whose = "torch " if re.search(r"file `torch/|function `torch\.", cause.words) else ""  # or a builtin
        how = (
            "cannot trace this builtin" if "Python builtin" in cause.words else f"skips this {whose}function on purpose"
        )
        fix = reorder_fix(inner, code) or (  # warnings.warn: Dynamo can move it past the graph
            f"call it outside the compiled function where you can (before or after it): Dynamo {how} and runs it "
            "eagerly, between two graphs; else accept the break"
        )
        fix = legacy_fix(cause.words, code) or fix  # Variable(t) is t.detach(): said so
        if re.search(r"`(?:GradScaler|Optimizer|\w+\.zero_grad)\b", cause.words):  # a whole training step compiled
            fix = TRAINING_STEP_FIX
        if "lr_scheduler.py" in cause.words:  # the scheduler's counting wrapper around optimizer.step()
            fix = (
                "usually none: an LR scheduler wraps optimizer.step() to count its calls; Dynamo runs that "
                "wrapper eagerly on purpose and compiles the step itself as a graph of its own"
            )
        cause = dataclasses.replace(cause, fix=fix)
    cause = shape_op_said(dataclasses.replace(cause, words=carried_call(cause.words, code)), code, at, library)
    cause = with_rnn_cost(cause, code)
    generator = _SOURCELESS_WORDS[-30:] in cause.words or "over `UserDefinedObjectVariable(generator)`" in cause.words
    if generator and not cause.fix:  # a generator passed in (torch 2.13 words it so): a list traces
        fix = "pass a list in place of a generator (list(model.parameters())), or call it outside the compiled function"
        cause = dataclasses.replace(cause, fix=fix)
    if dense := _DENSE.search(cause.words):  # the op behind .item(), int(t) and a 0-d tensor used as an index
        said = "a tensor's value is read back as a Python number here (.item(), int(t), or a 0-d tensor as an index)"
        said = (
            "a tensor's values are each read back as a Python number here (.tolist())" if ".tolist()" in code else said
        )
        cause = dataclasses.replace(cause, words=cause.words.replace(dense[0], said))
    for said, fix in (("does not support sparse Tensors", SPARSE_FIX), ("`Tensor.backward()`", TRAINING_STEP_FIX)):
        cause = dataclasses.replace(cause, fix=fix) if said in cause.words else cause  # Dynamo's hints do not help
    cause = dataclasses.replace(cause, fix=switch) if (switch := lib.backend_context(code)) else cause  # its own line
    if "Missing `as_proxy()`" in cause.words and "generator" in code:  # a torch.Generator cannot enter a graph
        words = "a torch.Generator is passed to a torch function (generator=...): Dynamo cannot put one in a graph"
        fix = "seed the global generator outside the compiled function (torch.manual_seed) and drop generator=, or "
        cause = dataclasses.replace(cause, words=words, fix=fix + "draw the random tensor outside and pass it in")
    if found is not None and "torch.compiler.disable" in found.gb_type:  # the user's choice, not a mistake
        name = re.search(r"function `([^`]+)`", cause.words)
        what = f"{name[1]} is" if name else "the function called is"
        cause = dataclasses.replace(
            cause,
            kind="disabled",
            words=f"{what} wrapped with torch.compiler.disable: it runs eagerly and splits the graph in two there "
            "(expected: that is what disable does)",
            fix="expected; keep the disabled call out of hot loops (call it less often, or outside the compiled "
            "function) if the split costs time, else accept the break",
        )
    ours = not drawn_fixes(cause.fix) and NUMPY_SAID not in cause.words
    scalar = re.search(
        r"\.item\(\)|\.tolist\(\)|_local_scalar_dense|operator `range` with argument types \['Tensor", reason
    )
    if ours and (scalar or "data-dependent" in reason.lower()) and only_raises(*at):  # assert not t.isnan().any()
        cause = dataclasses.replace(cause, fix=CHECK_FIX)
    elif ours and scalar and (counted := python_int_fix(code, *at)):  # range(a tensor), a list sliced by one
        cause = dataclasses.replace(cause, fix=counted)
    elif (
        ours
        and (scalar or "data-dependent" in reason.lower())
        and (use.controls_python(code, *at) or (scalar and sized_here(code)))
    ):
        sized = sizes_set_by(code, *at)  # TimesNet's period: a size, which no mask or torch.cond can hold
        fix = SIZES_FIX.format(sized) if sized else use.CONTROL_FIX if scalar else _NO_READ_FIX
        cause = dataclasses.replace(cause, fix=fix)
    elif ours and scalar and use.feeds_bookkeeping(code, *at):
        cause = dataclasses.replace(cause, fix=use.bookkeeping_fix(code))
    if "failed with aten._local_scalar_dense" in cause.words:  # the backend met a value read back: a 0-d index
        said = "a tensor's value read back as a Python number (.item(), int(t), or a 0-d tensor as an index)"
        words = cause.words.replace("aten._local_scalar_dense.default", said + read_back_at(inner, *at))
        cause = dataclasses.replace(cause, words=words, fix=_READ_BACK_FIX if ours else cause.fix)  # else drawn
    cause = sized_typed(cause, code, *at)  # torch.FloatTensor(size): a tensor of the size's numbers under compile
    if outer:  # a break Dynamo could not resume from (inside a loop): the whole function is skipped
        kind, why, _ = _sections(outer)
        why = "inside a for/while loop, where Dynamo cannot resume" if kind == "graph break in loop" else clean(why)
        cause = dataclasses.replace(cause, words=f"{cause.words.rstrip('.')}, {why or 'and Dynamo could not resume'}")
    if stopped_at and reason.startswith("Backend compiler"):  # no graph to resume after: the frame runs eagerly
        words = f"{cause.words.rstrip('.')}, and Dynamo cannot resume after a backend's failure: the code from here on runs eagerly on every call"
        cause = dataclasses.replace(cause, words=words)
    elif stopped_at:  # Dynamo compiled up to its last resumable point and runs the rest eagerly
        said = cause.words.rstrip(".").removesuffix(", where Dynamo cannot resume")  # a loop's break says it already
        words = (
            f"{said}, where Dynamo cannot resume (it resumes only at a function call, outside a try/with block): it compiles "
            f"the function up to line {stopped_at} and the rest runs eagerly on every call"
        )
        cause = dataclasses.replace(cause, words=words)
    if not library:
        return cause
    setting = ""
    if "graph_break()" in reason or "User-inserted graph break" in reason or cause.kind == "disabled":
        fix = "none on your side: the library breaks the graph there on purpose"
        own = f"{library.split('/')[0]}'s own code breaks the graph on purpose (a graph_break() call at {library})"
        if cause.words.startswith("User-inserted graph break"):  # the library's own call, never the user's
            return dataclasses.replace(cause, words=own, fix=fix)
    else:
        fix = f"it is in library code: {lib.outside_fix(code, at[0])}"
        said = "\n".join(line for line in inner.splitlines() if "Hint:" not in line)  # a config: no edit of the library
        configs = [h for h in usable_hints(_sections(inner)[2], said) if "torch._dynamo.config." in h]
        capture = re.search(r"torch\._dynamo\.config\.capture_\w+", configs[0]) if configs else None
        if capture:  # it traces this one call; the library's code after it may break again on the value
            fix += f"; {capture[0]} = True traces this one call, and helps only where the library's code after it "
            fix += "does not branch on the value"
        elif configs:
            fix = f"{configs[0]}; or {fix.removeprefix('it is in library code: ')}"
        fix = cause.fix if "ignore_logging_functions.add(" in cause.fix else fix  # names the logger already
        fix = cause.fix if SHAPED.search(inner) else fix  # its own fix weighs Dynamo's capture hint already
        special = lib.avoided_by_argument(library) or lib.config_switch(library, cause.words)
        special = special or lib.backend_context(code) or lib.warned_fix(library, code, at[0]) or lib.ao_fix(library)
        generic = fix.startswith("it is in library code")  # no more specific fix (a logger's, Dynamo's setting)
        setting, behind = lib.setting_behind(library, code) if generic and not special else ("", "")  # its default
        fix = special or behind or fix
        sized = use.size_made_tensor(code, *at) if re.search(r"_local_scalar_dense|\.item\(\)", reason) else ""
        fix = sized or fix  # Pytorch-UNet's pad amounts: torch.tensor([a size]), read back inside F.pad
    words = cause.words.replace(_PASSED, " that library code makes")  # deepcopy's OrderedDict iterator: not passed in
    return dataclasses.replace(cause, words=f"{words} (inside {library}, library code{setting})", fix=fix)
