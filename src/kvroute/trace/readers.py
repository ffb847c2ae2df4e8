"""Reading any supported trace: format registry, auto-detection, skip-or-fail policy.

``read_trace`` is the one entry point: it streams :class:`Request` objects from a file
in any registered format, detected from the first record unless forced. A malformed
record raises :class:`~kvroute.errors.InputError` naming file, line and field, or is
counted and skipped when ``skip_invalid`` is set; a header line that cannot be used
(an unsupported version) always raises, since every record depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kvroute.errors import EmptyTraceError, InputError
from kvroute.registry import Registry
from kvroute.trace.formats.bailian import BailianFormat
from kvroute.trace.formats.base import Container, ReadOptions, RecordError, TraceFormat
from kvroute.trace.formats.kvroute import HeaderError, KvrouteFormat
from kvroute.trace.formats.mooncake import MooncakeFormat
from kvroute.trace.formats.openai_log import OpenAILogFormat
from kvroute.trace.formats.sharegpt import ShareGPTFormat
from kvroute.trace.io import ReadStats, head_text, iter_json_array, iter_json_lines
from kvroute.trace.records import Request

FormatFactory = Callable[[], TraceFormat]


def trace_formats() -> Registry[FormatFactory]:
    """The registered trace formats, in detection order (most specific first)."""
    reg: Registry[FormatFactory] = Registry("trace format")
    reg.add("kvroute", KvrouteFormat)
    reg.add("bailian", BailianFormat)
    reg.add("mooncake", MooncakeFormat)
    reg.add("sharegpt", ShareGPTFormat)
    reg.add("openai", OpenAILogFormat)
    return reg


def _records(path: Path, container: Container, stats: ReadStats) -> Iterator[tuple[int, Any]]:
    if container is Container.JSON_ARRAY:
        return iter_json_array(path)
    return iter_json_lines(path, stats)


def _first_record(path: Path) -> tuple[Container, Any]:
    head = head_text(path)
    stripped = head.lstrip()
    if not stripped:
        raise EmptyTraceError(
            "the file is empty", path=str(path), hint="point at a trace with at least one request"
        )
    if stripped.startswith("["):
        for _, rec in iter_json_array(path):
            if isinstance(rec, InputError):
                raise rec
            return Container.JSON_ARRAY, rec
        raise EmptyTraceError("the JSON array is empty", path=str(path))
    for _, rec in iter_json_lines(path):
        if isinstance(rec, InputError):
            raise InputError(
                f"{rec.bare_message}; cannot detect the format from it",
                path=str(path),
                line=rec.line,
                hint="fix the line or pass --format",
            )
        return Container.JSONL, rec
    raise EmptyTraceError("the file has no records", path=str(path))


def detect_format(path: Path) -> str:
    """The name of the registered format whose sniffer accepts the file's first record."""
    container, first = _first_record(path)
    for name, factory in trace_formats():
        if factory().sniff(first):
            return name
    valid = ", ".join(trace_formats().names())
    raise InputError(
        f"unrecognised {container.value} trace format",
        path=str(path),
        line=1,
        hint=f"pass --format with one of: {valid}",
    )


def _forced_format_hint(path: Path, forced: str) -> str:
    try:
        detected: str | None = detect_format(path)
    except InputError:
        detected = None
    if detected is not None and detected != forced:
        return (
            f"the file looks like {_a(detected)} {detected} trace: drop --format {forced} "
            f"(or pass --format {detected})"
        )
    return (
        f"is it {_a(forced)} {forced} trace? drop --format to detect the format, or fix the record"
    )


def _a(name: str) -> str:
    """The article before a format's name: ``an openai``, ``a mooncake``."""
    return "an" if name[:1] in "aeio" else "a"


def read_trace(
    path: Path,
    format_name: str | None = None,
    *,
    options: ReadOptions | None = None,
    skip_invalid: bool = False,
    stats: ReadStats | None = None,
) -> Iterator[Request]:
    """Stream the requests of ``path``.

    ``format_name`` forces a format (else detected). With ``skip_invalid`` a malformed
    record is counted in ``stats`` and skipped; otherwise it raises ``InputError``.
    Raises ``EmptyTraceError`` when the file yields no request at all.
    """
    opts = options or ReadOptions()
    st = stats if stats is not None else ReadStats()
    name = format_name or detect_format(path)
    fmt = trace_formats().get(name)()
    container = fmt.container
    if container is Container.JSON_ARRAY and not head_text(path, 4096).lstrip().startswith("["):
        container = Container.JSONL  # ShareGPT-style conversations may also come one per line
    num_yielded = 0
    for index, (line_no, rec) in enumerate(_records(path, container, st)):
        if isinstance(rec, InputError):
            if not skip_invalid:
                raise InputError(
                    rec.bare_message,
                    path=str(path),
                    line=line_no,
                    hint="fix the line or pass --skip-invalid",
                )
            st.skip(rec)
            continue
        try:
            requests = fmt.parse(rec, index, line_no, opts)
        except RecordError as exc:
            err = InputError(exc.message, path=str(path), line=line_no, field=exc.field)
            if isinstance(exc, HeaderError):  # fatal: the records depend on the header
                err.hint = exc.hint
                raise err from None
            if not skip_invalid:
                # A forced format failing on the first record is most likely the wrong
                # format, not a bad record: skipping would skip the whole file.
                err.hint = (
                    _forced_format_hint(path, name)
                    if format_name is not None and num_yielded == 0
                    else "fix the record or pass --skip-invalid to count and skip such records"
                )
                raise err from None
            st.skip(err)
            continue
        for req in requests:
            st.num_read += 1
            num_yielded += 1
            yield req
    if num_yielded == 0:
        detail = f" ({st.num_skipped} invalid records skipped)" if st.num_skipped else ""
        raise EmptyTraceError(
            f"no usable request in the {name} trace{detail}",
            path=str(path),
            hint=_forced_format_hint(path, name) if format_name and st.num_skipped else None,
        )
