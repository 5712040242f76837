"""Where a number read back, or a branch's value, comes from a Python random draw: the line that draws it
(``lam = np.random.beta(1, 1)``), or the nearest line above that assigns a name the code reads from a draw,
directly or through a function of the same file that draws inside (CutMix's ``x1, x2 = rand_box(...)``),
and for a backend's failure the line its original traceback names. Source lines in, (line, code) out."""

from __future__ import annotations

import ast
import linecache
import re

from tpu_lab.compile.causes.cause import call_arguments
from tpu_lab.compile.causes.source_file import parsed_file

_RANDOM = re.compile(r"\b(?:random|np\.random|numpy\.random)\.\w+\(")
_ASSIGNED = re.compile(r"(?P<names>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=(?!=)\s*(?P<expr>.+)")


_FAILED_AT = re.compile(
    r'Original traceback:\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]+\n\s*(?P<code>[^\n]+)'
)


def read_back_origin(inner: str, code: str, file: str, line: int) -> tuple[int, str]:
    """``random_origin`` of the line that reads a number back: the one a backend's failure names in its
    original traceback (the line after a break, in the function resumed there), else the break's own."""
    if m := _FAILED_AT.search(inner):
        code, file, line = m["code"], m["file"], int(m["line"])
    return random_origin(code, file, line)


def read_back_at(inner: str, file: str, line: int) -> str:
    """`` on line N: <code>`` where a backend's failure names a line other than the break's (the line after
    it, in the function resumed there); '' where it names none or the same."""
    m = _FAILED_AT.search(inner)
    if m is None or (m["file"], int(m["line"])) == (file, line):
        return ""
    where = f"line {m['line']}" if m["file"] == file else f"{m['file'].rsplit('/', 1)[-1]}:{m['line']}"
    return f" on {where}: {m['code'].strip()}"


def random_origin(code: str, file: str, line: int) -> tuple[int, str]:
    """(line, code) of ``line`` where ``code`` draws a Python random number itself, else of the nearest line
    above it, inside its function, that assigns one of the names ``code`` reads from such a draw; (0, '')
    where none does."""
    if not (code and file and line):
        return 0, ""
    if _RANDOM.search(code):  # drawn on the line itself: if np.random.rand() < 0.5:
        return line, code.strip()
    names = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", code))
    for n in range(line - 1, max(line - 100, 0), -1):  # the nearest assignment above, inside the function
        text = linecache.getline(file, n).strip()
        if text.startswith(("def ", "async def ")):
            break
        a = _ASSIGNED.match(text)  # x = np.random.rand(); x1, x2 = rand_box(...), which draws inside
        if a and names & {t.strip() for t in a["names"].split(",")} and _draws(a["expr"], file):
            return n, text
    return 0, ""


def _draws(expr: str, file: str) -> bool:
    """``expr`` draws a random number itself, or calls a function of ``file`` whose body draws one."""
    if _RANDOM.search(expr):
        return True
    called = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\(", expr))
    tree = parsed_file(file) if called else None
    return any(
        isinstance(f, ast.FunctionDef)
        and f.name in called
        and any(_RANDOM.search(linecache.getline(file, n)) for n in range(f.lineno, (f.end_lineno or f.lineno) + 1))
        for f in (ast.walk(tree) if tree else ())
    )


def draws_random(code: str) -> bool:
    """The line draws a Python (or NumPy) random number."""
    return bool(_RANDOM.search(code))


def drawn_by(line: str) -> str:
    """Whose random draw a line makes: NumPy's (``np.random.rand(1)``) or Python's (``random.random()``)."""
    return "NumPy" if re.search(r"\b(?:np|numpy)\.random\.", line) else "Python"


# Calls that take their number as one fixed value (measured: a new float each call is a graph each call, passed in
# as an argument or not), where a number used in arithmetic turns symbolic after one recompile.
_FIXED_NUMBER = re.compile(
    r"\.(?P<call>normal_|uniform_|bernoulli_|exponential_|log_normal_|cauchy_)\(|\b(?P<drop>dropout)\("
)


def fixed_by_call(code: str, drawn: str) -> str:
    """The call on ``code`` that takes a number of the random draw ``drawn`` (a line that draws, or assigns names
    from a draw) as one fixed value (``normal_`` for ``.normal_(std=stdN[n] / 255.)``); '' where none does."""
    assigned = _ASSIGNED.match(drawn.strip())
    names = {n.strip() for n in assigned["names"].split(",")} if assigned else set()
    for m in _FIXED_NUMBER.finditer(code):
        args = call_arguments(code, m.end()) or ""
        read = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)(?!\s*=(?!=))", args))  # a keyword's own name (p=) is no read
        if _RANDOM.search(args) or names & read:
            return m["call"] or m["drop"]
    return ""
