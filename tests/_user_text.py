"""What a reader must never meet on a screen: Python values where prose belongs, internal codes, and
sentences that contradict themselves. ``defects(text)`` lists each one found (empty: the text reads as
prose). Used on rendered reports, error messages and executed notebooks' outputs.

Code a reader is meant to paste is allowed: a ``name=value`` argument (``tp_plan={...}``), a value in
backticks, and the lines of a code snippet (``DistributedConfig(...)``) are skipped."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every finding code in the package (the first argument of Finding(...), or a code a helper passes on).
CODES = frozenset(
    re.findall(
        r'Finding\(\s*"([a-z0-9]+(?:-[a-z0-9]+)+)"',
        "\n".join(p.read_text() for p in (ROOT / "tpu_lab").rglob("*.py")),
    )
)

PATTERNS = {
    # an empty container or None shown as a value: "generate with  {}: ...", "vocab None"
    "an empty Python container": re.compile(r"(?<![=\w`'\"(\[{])(\{\}|\[\]|\(\))(?![\w`'\"])"),
    # "at line None", "vocab: None", "None / 1024": None where a value belongs (naming the Python value, as in
    # "or None for the default", is fine in a Python API's message)
    "None shown as a value": re.compile(r"(?:[:=]\s+|\bline |\bat |/\s*|^\s*)None\b(?![\w=`'\"(])|\bNone\s+/", re.M),
    # "Use a count in [1, 4]": a range or choice written as a Python list
    "a Python list used as a range or choice": re.compile(r"\b(?:in|of|from|one of)\s+\[\d+(?:, \d+)+\]"),
    # {'cache_implementation': 'static'} or ('a', 'b') outside an argument
    "a dict repr": re.compile(r"(?<![=\w(`])\{'[^']*': "),
    "a tuple repr": re.compile(r"(?<![=\w`])\((?=[^)]*')(?:'[^']*'|\d+)(?:, (?:'[^']*'|\d+))+,?\)"),
    # ['stopped', 'failed']: a list of strings printed as Python shows it (one item in brackets is how a
    # message echoes the value a user passed, or indexes a dict: not this)
    "a list repr": re.compile(r"(?<![=\w(`])\['[^']*'(?:, '[^']*')+\]"),
    # "1 tokens", "1 compiles": a count of one with a plural noun
    "one with a plural": re.compile(
        r"(?<![\d.,])\b1 (?:tokens|compiles|compilations|recompiles|graphs|calls|ranks|prompts|processes|hosts|"
        r"breaks|buckets|rows|chips|lengths|values|times|layers|heads|files|lines|shapes|records|errors|warnings|"
        r"seconds|nodes|functions|frames|guards|steps|sizes|items)\b"
    ),
    "an object repr": re.compile(
        r"<[\w.]+ object at 0x[0-9a-f]+>|\b(?:PosixPath|WindowsPath|ShapeSignature|ShapeRow|Finding|TpuChips|"
        r"CompileEvent|GenerationRecord|AcceleratorInfo|np\.float\d*|np\.int\d*)\("
    ),
    "float noise": re.compile(r"\d\.\d*(?:0000000|9999999)\d"),
    # "use a tp_size that divides 1": advice no value can follow
    "advice that cannot be followed": re.compile(r"\b(?:divides|dividing) 1\b(?!\d)|\bbetween (\d+) and \1\b"),
    # "session hit the limit: True", "ties embeddings: True | still one tensor: False"
    "a bool shown as a value": re.compile(r"(?:[:=]\s+|\|\s*)(?:True|False)\s*(?:$|\|)", re.M),
}


def _is_code(line: str) -> bool:
    """Lines of a snippet meant to be pasted, or a traceback's."""
    s = line.strip()
    return bool(
        re.match(r"^(>>>|\.\.\.|#|from |import |Traceback|File \"|\w+(\.\w+)* = |\w+\(\s*$|[)\]}],?$)", s)
        or re.match(r"^['\"][^'\"]+['\"]: ['\"]", s)  # a dict entry of a snippet
        or re.match(r"^\w+=[^ ]+,$", s)  # tp_size=4,
    )


def _strip_code(line: str) -> str:
    line = re.sub(r"`[^`]*`", "`…`", line)  # `code` spans
    line = re.sub(r"\b(got|found) (\S.*?)(?=[.;]( |$)|$)", r"\1 …", line)  # the value a user passed, echoed
    # an argument a reader can paste: name=value, including a bracketed value
    return re.sub(r"\b\w+=(\{[^}]*\}|\[[^\]]*\]|\([^)]*\)|'[^']*'|\"[^\"]*\"|[^\s,;)]+)", "arg=…", line)


def repeated_clause(line: str) -> str | None:
    """A clause of 4+ words (3 of them words, not numbers) said twice in one line ("new batch size 3 ...;
    ...; new batch size 3 ...")."""
    parts = re.split(r"[;:.]\s+|\(|\)", line)
    clauses = [c.strip().lower() for c in parts if len(c.split()) >= 4 and len(re.findall(r"[a-z]{2,}", c)) >= 3]
    seen = set()
    for c in clauses:
        if c in seen:
            return c
        seen.add(c)
    return None


def defects(text: str) -> list[str]:
    """Each defect as ``"kind: the line"`` (empty when the text reads as prose)."""
    found = []
    for raw in text.splitlines():
        if _is_code(raw):
            continue
        line = _strip_code(raw)
        for kind, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append(f"{kind}: {raw.strip()[:200]}")
        codes = [c for c in CODES if re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", line)]
        if codes:
            found.append(f"an internal code ({', '.join(sorted(codes))}): {raw.strip()[:200]}")
        again = repeated_clause(line)
        if again:
            found.append(f"a clause said twice ({again!r}): {raw.strip()[:200]}")
    return found


class _Text(HTMLParser):
    """The text a reader sees in HTML: tags, attributes (data-code, style) and <pre>/<code> blocks dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._code = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("pre", "code", "script", "style"):
            self._code += 1
        if tag in ("br", "p", "div", "tr", "li", "h4", "table"):
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append("  ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("pre", "code", "script", "style"):
            self._code = max(0, self._code - 1)

    def handle_data(self, data: str) -> None:
        if not self._code:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return "".join(parser.parts)


def notebook_defects(nb) -> list[str]:
    """Defects in an executed notebook: its markdown cells and every output a reader sees (text, HTML,
    stream output, error messages), each named by its cell number."""
    found = []
    for i, cell in enumerate(nb.cells, 1):
        texts = []
        if cell.cell_type == "markdown":
            source = re.sub(r"```.*?```", "", "".join(cell.source), flags=re.S)  # fenced code is code
            texts.append(source)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append("".join(out.get("text", "")))
            elif out.get("output_type") == "error":
                texts.append(f"{out.get('ename')}: {out.get('evalue')}")
            data = out.get("data", {})
            if "text/html" in data:
                texts.append(html_text("".join(data["text/html"])))
            elif "text/plain" in data and out.get("output_type") == "display_data":
                texts.append("".join(data["text/plain"]))
            # a cell's plain value (a list of buckets, a dict) is what its code asked for: not prose
        found += [f"cell {i}: {d}" for t in texts for d in defects(t)]
    return found
