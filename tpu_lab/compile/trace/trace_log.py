"""One TORCH_TRACE log file, streamed: each compile Dynamo started in that process (by compile id), with
what the log holds about it: the user's stack, the recompile reasons, Dynamo's compilation record, the
inputs it described, the new graph's guards, the graph breaks. One line at a time, keeping only those
few fields, so a log of any size is read in bounded memory; what cannot be read is counted, never guessed.

The format (``torch._logging.structured``): a glog header, a JSON object, then the payload on lines that
start with a tab. Fields this reader does not know are skipped and counted by name (``unknown``).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from tpu_lab.compile.trace.trace_payloads import reasons_of, resume_line

_HEADER = re.compile(rb"^[VIWEDC](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?) +(\d+) [^\]]*\] ")
MAX_LINE = 16 << 20  # bytes: a compile record is ~50 KB; a longer line is damage, skipped, never held whole
_PAYLOAD_CAP = 1 << 20  # characters kept of one payload (a guard tree of a huge model); the rest is not needed
_GUARDS_KEPT = 4000  # guard lines kept per graph: the inputs' and the numbers' come first in Dynamo's tree
_METRICS = [
    "co_name",
    "co_filename",
    "co_firstlineno",
    "cache_size",
    "accumulated_cache_size",
    "graph_op_count",
    "has_guarded_code",
    "entire_frame_compile_time_s",
    "backward_cumulative_compile_time_us",
    "fail_type",
    "fail_reason",
    "fail_user_frame_filename",
    "fail_user_frame_lineno",
    "recompile_reason",
    "graph_node_shapes",
    "is_forward",
    "inductor_fx_local_cache_hit_count",
    "inductor_fx_remote_cache_hit_count",
    "aotautograd_local_cache_hit_count",
    "aotautograd_remote_cache_hit_count",
    "start_time",
    "config_suppress_errors",
]
_CONFIG = ("recompile_limit", "automatic_dynamic_shapes", "assume_static_by_default", "suppress_errors")
_KNOWN = {
    "chromium_event", "str", "artifact", "dynamo_start", "compilation_metrics", "bwd_compilation_metrics",
    "describe_tensor", "describe_source", "describe_storage", "create_symbol", "dynamo_cpp_guards_str",
    "dynamo_output_graph", "aot_forward_graph", "aot_backward_graph", "aot_joint_graph", "aot_inference_graph",
    "inductor_output_code", "inductor_post_grad_graph", "inductor_pre_grad_graph", "guard_added",
    "guard_added_fast", "propagate_real_tensors", "symbolic_shape_specialization", "optimize_ddp_split_graph",
    "optimize_ddp_split_child", "compiled_autograd_graph", "dynamo_guards", "missing_fake_kernel",
    "mismatched_fake_kernel", "link", "exported_program", "graph_dump", "unbacked_symbol", "expression_created",
}  # fmt: skip
_ARTIFACTS = {"recompile_reasons", "dynamo_graph_break_reason", "torch_version"}
_RESUME_CODE = "_ORIGINAL_BYTECODE"  # a resume function's bytecode: where it continues after the break


@dataclass
class CompileLog:
    """What one log says about one compile (``frame/attempt``-numbered as Dynamo numbers it)."""

    compile_id: str
    at: float = 0.0
    """Seconds into the day the compile started (the log's own clock)."""
    stack: list[tuple[str, int, str]] = field(default_factory=list)
    """(file, line, function) from the outermost user frame to the compiled one."""
    reasons: list[str] = field(default_factory=list)
    record: dict[str, Any] | None = None
    """Dynamo's compilation record (its fields this reader uses), once the compile ended."""
    backward: dict[str, Any] | None = None
    """The lazy backward graph's record, where one compiled."""
    tensors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Dynamo's source (``L['x']``) -> the tensor it described: dtype, size, requires_grad."""
    symbols: dict[str, str] = field(default_factory=dict)
    """Dynamo's source -> value, for every size or number the compile made symbolic."""
    guards: list[str] = field(default_factory=list)
    """The new graph's guards, one line each as Dynamo's tree prints them."""
    resumes_at: int = 0
    """For the part of a function after a graph break: the line it continues at (0: not logged)."""
    breaks: list[tuple[str, list[tuple[str, int]]]] = field(default_factory=list)
    """(reason, the user's stack down to it as (file, line)) of each graph break logged while tracing it."""
    pins: list[tuple[str, str, list[tuple[str, int, str]]]] = field(default_factory=list)
    """(source, value, the user's stack as (file, line, code)) of each size the compile fixed to one value."""


@dataclass
class ProcessLog:
    """One process's log: its rank, its compiles in order, and what could not be read."""

    path: str
    rank: int | None = None
    pid: int = 0
    torch_version: str = ""
    first_at: float = 0.0
    """Seconds into the day of the first line (the log's own clock; ``day`` counts the days)."""
    day: str = ""
    """``MMDD`` of the first line."""
    compiles: dict[str, CompileLog] = field(default_factory=dict)
    bad_lines: int = 0
    cut_last_line: bool = False
    """The file ends inside a line (the process was killed while writing, or the copy was cut)."""
    unknown: dict[str, int] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    """Fields of Dynamo's compilation records this reader uses that the log's records lack (another torch)."""
    records: int = 0
    """Compilation records seen (a log with compile starts and none of these is of another format)."""
    """Entries of kinds this reader does not know (another torch), by name: kept out, counted."""
    compiled: int = 0
    """Compiles the log records (set by ``slim``, which drops their details once they are folded)."""

    def slim(self) -> ProcessLog:
        """This log without its compiles' details (folded already), but the one it may end inside."""
        last = self.unfinished
        return replace(self, compiles={last.compile_id: last} if last else {}, compiled=len(self.compiles))

    @property
    def unfinished(self) -> CompileLog | None:
        """The compile the log ends inside (started, never recorded): the process ended or the log was cut there."""
        last = next(reversed(self.compiles.values()), None)
        return last if last is not None and last.record is None and last.stack else None


def read_process_log(path: Path) -> ProcessLog:
    """Stream one file (``.gz`` too) into a ``ProcessLog``; raises OSError only where the file cannot be opened."""
    log = ProcessLog(str(path))
    m = re.search(r"_rank_(\d+)_", path.name)
    log.rank = int(m[1]) if m else None
    with _open(path) as f:
        _Reader(log).feed(f)
    return log


def _open(path: Path) -> IO[bytes]:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]  # a binary file object
    return path.open("rb")


class _Reader:
    def __init__(self, log: ProcessLog) -> None:
        self.log = log
        self.files: dict[int, str] = {}  # the log's interned file names
        self.payload: list[str] | None = None
        self.payload_size = 0
        self.pending: tuple[str, dict[str, Any], float] | None = None  # an entry waiting for its payload
        self.last = b""  # the last line read: a file that ends inside one was cut
        self.described: dict[tuple[str, Any, Any], dict[str, Any]] = {}  # (compile, describer, id) -> tensor

    def feed(self, f: IO[bytes]) -> None:
        line, broken = b"", False  # broken: a payload cut by a damaged line; its rest is skipped, never used
        while line := f.readline(MAX_LINE):
            if len(line) == MAX_LINE and not line.endswith(b"\n"):  # no line is this long: skip to the next
                while (rest := f.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                    pass
                self.log.bad_lines += 1
                self.last = rest or line
                continue
            if line.startswith(b"\t"):
                if broken:
                    continue
                if self.payload is not None and self.payload_size < _PAYLOAD_CAP:
                    text = line[1:].decode("utf-8", "replace").rstrip("\n")
                    self.payload.append(text)
                    self.payload_size += len(text)
                self.last = line
                continue
            broken = self.pending is not None and _HEADER.match(line) is None and bool(line.strip())
            if broken:  # an entry whose payload a damaged line interrupts: dropped whole, not read in part
                self.pending, self.payload = None, None
                self.log.bad_lines += 1
            self._finish_payload()
            self._header(line)
            self.last = line
        self._finish_payload()
        if self.last and not self.last.endswith(b"\n"):
            self.log.cut_last_line = True

    def _header(self, line: bytes) -> None:
        m = _HEADER.match(line)
        body = line[m.end() :] if m else b""
        if m is None or not body.startswith(b'{"'):
            if line.strip():
                self.log.bad_lines += 1
            return
        kind = body[2 : body.find(b'"', 2)].decode("ascii", "replace")
        at = int(m[3]) * 3600 + int(m[4]) * 60 + float(m[5])
        if not self.log.day:
            self.log.day, self.log.first_at, self.log.pid = (m[1] + m[2]).decode(), at, int(m[6])
        if kind == "chromium_event" or kind not in _KNOWN:
            if kind != "chromium_event":
                self.log.unknown[kind] = self.log.unknown.get(kind, 0) + 1
            return
        if kind in ("describe_storage", "dynamo_output_graph") or kind.startswith(("aot_", "inductor_", "optimize_")):
            return  # graphs and storages: nothing a compile table needs
        try:
            entry = json.loads(body)
        except ValueError:
            self.log.bad_lines += 1
            return
        if not isinstance(entry, dict):
            self.log.bad_lines += 1
            return
        if isinstance(entry.get("rank"), int) and self.log.rank is None:
            self.log.rank = entry["rank"]
        name = str((entry.get("artifact") or {}).get("name")) if kind == "artifact" else ""
        if kind == "artifact" and name not in _ARTIFACTS and not name.endswith(_RESUME_CODE):
            return
        if entry.get("has_payload") and kind in ("artifact", "dynamo_cpp_guards_str"):
            self.payload, self.payload_size, self.pending = [], 0, (kind, entry, at)
            return
        self._entry(kind, entry, at, None)

    def _finish_payload(self) -> None:
        if self.pending is not None:
            kind, entry, at = self.pending
            self.pending = None
            self._entry(kind, entry, at, "\n".join(self.payload or ()))
        self.payload = None

    def _compile(self, entry: dict[str, Any], at: float) -> CompileLog | None:
        frame, n = entry.get("frame_id"), entry.get("frame_compile_id")
        if not isinstance(frame, int) or not isinstance(n, int):
            return None
        key = f"{frame}/{n}"
        found = self.log.compiles.get(key)
        if found is None:
            found = self.log.compiles[key] = CompileLog(key, at)
        return found

    def _entry(self, kind: str, entry: dict[str, Any], at: float, payload: str | None) -> None:
        try:
            self._read(kind, entry, at, payload)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError):
            self.log.bad_lines += 1  # a field of an unexpected shape (another torch, a damaged line)

    def _read(self, kind: str, entry: dict[str, Any], at: float, payload: str | None) -> None:
        value = entry[kind]
        if kind == "str":
            self.files[int(value[1])] = str(value[0])
            return
        if kind == "artifact" and value["name"] == "torch_version":
            self.log.torch_version = str(json.loads(payload or "{}").get("pytorch_version", ""))
            return
        c = self._compile(entry, at)
        if c is None:
            return
        if kind == "dynamo_start":
            c.at = at
            self.described = {k: v for k, v in self.described.items() if k[0] == c.compile_id}
            c.stack = [(self.files.get(s.get("filename"), "?"), int(s["line"]), str(s["name"])) for s in value["stack"]]
        elif kind == "artifact" and value["name"].endswith(_RESUME_CODE):
            c.resumes_at = resume_line(payload or "")
        elif kind == "artifact" and value["name"] == "recompile_reasons":
            c.reasons = reasons_of(payload or "")
        elif kind == "artifact":  # a graph break's reason, then the user's stack down to it
            head, _, reason = (payload or "").partition("\n")
            where = re.search(r" at (.+):(\d+)$", head.strip())
            reason, _, traceback = reason.removeprefix("Graph Break Reason: ").partition("\nUser code traceback:")
            if not reason.strip():
                raise ValueError("a graph break with no reason")  # counted as a line not read
            stack = [(f, int(n)) for f, n in re.findall(r'^\s*File "(.+)", line (\d+), in ', traceback, re.M)]
            c.breaks.append((reason.strip(), stack or ([(where[1], int(where[2]))] if where else [])))
        elif kind in ("compilation_metrics", "bwd_compilation_metrics"):
            record = {k: value.get(k) for k in _METRICS}
            self.log.missing |= {k for k in _METRICS if k not in value}
            self.log.records += 1
            config = json.loads(value.get("dynamo_config") or "{}")
            record.update({f"config_{k}": config.get(k) for k in _CONFIG})
            if kind == "bwd_compilation_metrics" or value.get("is_forward") is False:
                c.backward = record
            else:
                c.record = record
        elif kind == "describe_tensor":
            self.described[(c.compile_id, value["describer_id"], value["id"])] = {
                "dtype": value.get("dtype"),
                "size": value.get("size"),
                "requires_grad": value.get("requires_grad", False),
                "stride": value.get("stride"),
            }
        elif kind == "describe_source":
            described = self.described.get((c.compile_id, value["describer_id"], value["id"]))
            if described is not None:
                c.tensors[str(value["source"])] = described
        elif kind == "symbolic_shape_specialization":  # a size fixed to one value, and the user's line that did it
            user = [
                (self.files.get(f.get("filename"), "?"), int(f["line"]), str(f.get("loc") or ""))
                for f in value.get("user_stack") or []
            ]
            c.pins += [(str(source), str(value.get("value")), user) for source in value.get("sources") or []]
        elif kind == "create_symbol":
            c.symbols[str(value["source"])] = str(value.get("val"))
        elif kind == "dynamo_cpp_guards_str":
            lines = (payload or "").splitlines()
            c.guards = [g for g in lines if "+- " in g][:_GUARDS_KEPT]
