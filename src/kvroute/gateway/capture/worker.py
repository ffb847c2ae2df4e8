"""Capture: a privacy-preserving kvroute trace of the traffic the gateway forwards.

The request path only hands a :class:`CaptureEvent` (a tuple of references to the
already decoded body and the request's counters: no copy, no tokenizing) to
:meth:`TraceCapture.submit`, a deque append. One worker thread wakes every
``flush_interval_s``, takes what is queued in chunks of 16, renders each new prompt
with the model's chat template, tokenizes it as the engine does (through the piece memo of
:mod:`kvroute.gateway.prompts.tokens`, so repeated system prompts and conversation
histories are encoded once), hashes the tokens into the chained block hashes of
:mod:`kvroute.trace.hashing` (in C when built, reusing a shared prefix's hashes; a body
seen before is not tokenized or hashed again: capture_records.py) and appends one
kvroute trace record (:mod:`kvroute.trace.formats.kvroute`) per request, one write per
:data:`RENDER_CHUNK` requests::

    {"t": 1764504000.125, "end_t": 1764504001.5, "session": "3f9c0e...", "model": "smollm2",
     "input_len": 1234, "output_len": 56, "hashes": [...], "class": "agent",
     "backend": "llama-1", "cached": 1200, "turn": 3, "messages": 7, "status": 200}

No text is written unless ``include_text`` is set (then ``prompt_text`` holds the
rendered prompt); session ids are written as a 64-bit BLAKE2b pseudonym. The hashes
written are keyed with the trace key (:mod:`kvroute.trace.keys`, the key file
``kvroute export`` uses, made on first use; the header names its id), so a capture
cannot be tested against a guessed prompt; the traffic window gets the unkeyed ones. Files rotate
on size or age (capture_files.py). :meth:`TraceCapture.close` drains the queue, so
nothing accepted is lost on a graceful stop. A full queue drops (and counts) events
rather than slow the gateway. A failed write (disk full, directory removed) loses its
batch, counted as failed and logged once per outage; the worker carries on with a new
file. :func:`check_capture_directory` is the start-up check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvroute.errors import InputError
from kvroute.gateway.capture.files import RotatingTraceFile, check_directory
from kvroute.gateway.capture.records import CaptureEvent, CaptureRecords
from kvroute.gateway.config.capture import CaptureConfig
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.hashing import key_id
from kvroute.trace.keys import default_key_file, load_or_create_key
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer

logger = logging.getLogger("kvroute.gateway.capture")

RENDER_CHUNK = 16
"""Requests rendered and written at a time. The worker holds the interpreter lock while
it renders (20-30 µs a new request), so a whole 0.2 s batch (100 requests at 500 req/s)
kept the event loop waiting up to ~3 ms: chunks of 16 halve the TTFT p99 that capture
adds (~1.1 -> ~0.6 ms, bench/RESULTS.md), at no measurable CPU. The traffic window
still gets one hand-over per wake-up (or per :data:`MAX_HANDOVER` records)."""

MAX_HANDOVER = 512
"""The most records handed to the traffic window at once: a queue that refills as fast
as the worker drains it still feeds the window."""


class TraceCapture:
    """Takes :class:`CaptureEvent` s on the event loop, writes them on a thread.

    The request path appends to a deque (atomic, no lock, no wake-up); the worker
    wakes every ``flush_interval_s``, takes everything queued and writes it as one
    batch, so a busy gateway pays no thread switch per request. Counters
    (``num_written``, ``num_failed`` by the worker; ``num_dropped`` by :meth:`submit`)
    each have a single writer.
    """

    def __init__(
        self,
        config: CaptureConfig,
        *,
        load: Callable[[str | None], ChatTokenizer] = load_tokenizer,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.files = RotatingTraceFile(Path(config.directory).expanduser(), config, wall_clock)
        self.num_written = 0
        self.num_failed = 0
        self.num_dropped = 0
        self._load = load
        self._pending: deque[CaptureEvent] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._records: CaptureRecords | None = None
        self._writes_failing = False
        """The last write failed (so an outage is logged once, and its end too)."""
        self.on_records: Callable[[list[dict[str, Any]]], None] | None = None
        """Called on the worker thread with the written records of events marked
        ``observe`` (must be thread-safe: the gateway hands them to its event loop)."""

    def start(self) -> None:
        """Check the directory, load the tokenizer (blocking: call it off the event
        loop) and start the worker. Raises :class:`KvrouteError` when the directory is
        not writable or the tokenizer cannot be loaded."""
        if self._thread is not None:
            return
        check_capture_directory(self.config)
        key_path = Path(self.config.key_file).expanduser() if self.config.key_file else None
        key, _ = load_or_create_key(key_path or default_key_file())
        self.files.key_id = key_id(key)
        self._records = CaptureRecords(
            PromptTokens(self._load(self.config.tokenizer or None)),
            block_size_tokens=self.config.block_size_tokens,
            include_text=self.config.include_text,
            key=key,
        )
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kvroute-capture", daemon=True)
        self._thread.start()

    def submit(self, event: CaptureEvent) -> None:
        """Queue one event; never blocks (a full queue drops it and counts it)."""
        if len(self._pending) >= self.config.max_queue:
            self.num_dropped += 1
            return
        self._pending.append(event)

    def close(self) -> None:
        """Write everything queued, then finish the current file (blocking)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        records = self._records
        assert records is not None
        while True:
            stopping = self._stop.wait(self.config.flush_interval_s)
            observed: list[dict[str, Any]] = []
            while self._pending:
                n = min(RENDER_CHUNK, len(self._pending))
                batch = [self._pending.popleft() for _ in range(n)]
                try:
                    self._write(records, batch, observed)
                except Exception:  # a bug, not the disk: count it, keep the worker alive
                    self.num_failed += len(batch)
                    logger.exception("capture failed on a batch of %d requests", len(batch))
                if len(observed) >= MAX_HANDOVER:  # a queue that keeps refilling
                    self._hand_over(observed)
                    observed = []
            self._hand_over(observed)
            if stopping:
                break
        try:
            self.files.close()
        except OSError as exc:
            logger.error("capture could not finish its last file: %s", _describe(exc))

    def _hand_over(self, observed: list[dict[str, Any]]) -> None:
        """Give the traffic window what this wake-up rendered (``on_records``)."""
        callback = self.on_records
        if callback is not None and observed:
            try:
                callback(observed)
            except Exception:  # the writer must outlive a broken observer
                logger.exception("capture's traffic observer failed")

    def _write(
        self, records: CaptureRecords, batch: list[CaptureEvent], observed: list[dict[str, Any]]
    ) -> None:
        try:
            lines, seen = records.render(batch, observed=self.on_records is not None)
        except Exception:  # the worker must outlive any odd batch
            self.num_failed += len(batch)
            logger.exception("capture failed on a batch of %d requests", len(batch))
            return
        observed += seen
        written: list[bytes] = []
        for line in lines:
            if isinstance(line, Exception):
                self.num_failed += 1
                logger.warning("capture skipped a request: %s", line)
            else:
                written.append(line)
        if written:
            written.append(b"")  # a line end after the last record too
            self._append(b"\n".join(written), len(written) - 1)

    def _append(self, data: bytes, num_records: int) -> None:
        """Write one batch. A failure (disk full, directory removed) loses this batch,
        counted as failed, and is logged once per outage; the next batch tries a new
        file, so capture resumes by itself when the cause is fixed."""
        try:
            self.files.write(data)
        except OSError as exc:
            self.files.abandon()
            self.num_failed += num_records
            if not self._writes_failing:
                logger.error(
                    "capture cannot write to %s: %s; records are lost (counted in "
                    'kvroute:capture_records_total{outcome="failed"}) until a write '
                    "succeeds again",
                    self.config.directory,
                    _describe(exc),
                )
            self._writes_failing = True
            return
        self.num_written += num_records
        if self._writes_failing:
            logger.warning("capture writes to %s again", self.config.directory)
            self._writes_failing = False


def check_capture_directory(config: CaptureConfig, source: str | None = None) -> None:
    """Create the capture directory if missing and check files can be written there.
    Raises :class:`InputError` at ``source``'s ``capture.directory`` otherwise."""
    try:
        check_directory(Path(config.directory).expanduser())
    except OSError as exc:
        raise InputError(
            f"cannot write capture files to {config.directory}: {_describe(exc)}",
            path=source,
            field="capture.directory",
            hint="point it at a directory kvroute can create or write to",
        ) from None


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)
