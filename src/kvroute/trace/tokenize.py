"""Turn chat and text prompts of a trace into token ids, streaming, on all cores.

:func:`tokenize_requests` reads requests in batches. Each batch's chat prompts are
rendered with the model's chat template and encoded with its tokenizer; text prompts are
encoded as they are; answers (``output_text``) are encoded the way an engine counts
generated tokens. Token and block prompts pass through untouched. Output order is input
order.

With ``workers > 1`` batches go to a process pool, because template rendering is Python
and holds the GIL. ``workers=None`` picks by machine and trace (:func:`auto_pool_workers`):
one process, which already encodes on every core (the tokenizer library's own threads),
unless the machine has at least :data:`POOL_MIN_CORES` cores and the trace outlasts
:data:`POOL_AFTER_REQUESTS` requests; then the rest goes to a pool of one worker per core
but one (the calling process keeps analysing). A pool costs a process and a tokenizer per
worker and a pickled copy of every batch both ways: on 2 cores it was slower than one
process (bench/RESULTS.md, "`--workers` default"). Each worker loads the tokenizer once, in the pool initializer, and
encodes on one core (the pool is the parallelism). At most ``2 * workers`` batches are
in flight, so memory stays bounded however long the trace. The pool uses the
interpreter's start method (``multiprocessing.get_context()``): ``fork`` on Linux up to
Python 3.13; with ``spawn`` or ``forkserver`` the calling script needs the usual
``if __name__ == "__main__":`` guard, as for any ``multiprocessing`` pool.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from itertools import islice
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path

from kvroute.errors import KvrouteError, TokenizerError, UsageError
from kvroute.trace.records import ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.trace.tokenizer import ChatTokenizer, default_model_path, load_tokenizer
from kvroute.types import TokenIds

_IN_FLIGHT_PER_WORKER = 2
POOL_MIN_CORES = 4
"""Fewer cores than this: ``workers=None`` tokenizes in the calling process."""
POOL_AFTER_REQUESTS = 4096
"""``workers=None`` tokenizes this many requests in the calling process before it starts a
pool (a short trace never pays for one)."""


def auto_pool_workers(cores: int) -> int:
    """Pool size ``workers=None`` moves to once a trace is long: 0 (no pool) below
    :data:`POOL_MIN_CORES` cores, else one worker per core but one."""
    return 0 if cores < POOL_MIN_CORES else cores - 1


@dataclass(frozen=True, slots=True)
class _Work:
    """What one batch needs encoded; ``*_at`` are indices into the batch."""

    prompts: list[ChatPrompt | TextPrompt]
    prompts_at: list[int]
    source_lines: list[int | None]
    outputs: list[str]
    outputs_at: list[int]

    @property
    def empty(self) -> bool:
        return not self.prompts and not self.outputs


@dataclass(frozen=True, slots=True)
class _Encoded:
    prompt_ids: list[TokenIds]
    output_ids: list[TokenIds]


def tokenize_requests(
    requests: Iterable[Request],
    tokenizer_source: str | Path | None,
    *,
    workers: int | None = None,
    batch_size: int = 256,
) -> Iterator[Request]:
    """Yield each request with chat/text prompts as :class:`TokenPrompt`, in input order.

    ``output_text`` becomes ``output_token_ids`` (and ``output_len`` when that is
    ``None``) unless ``output_token_ids`` is already set. ``tokenizer_source`` is what
    :func:`~kvroute.trace.tokenizer.load_tokenizer` takes. ``workers=None`` uses every
    core (see the module's note); ``workers=1`` stays in this process. The tokenizer is loaded only once a batch
    needs it. Raises :class:`~kvroute.errors.TokenizerError` (naming the request's source
    line when known) when a prompt cannot be rendered, and
    :class:`~kvroute.errors.UsageError` for ``workers`` or ``batch_size`` below 1.
    """
    if workers is not None and workers < 1:
        raise UsageError(f"workers must be at least 1, got {workers}")
    if batch_size < 1:
        raise UsageError(f"batch_size must be at least 1, got {batch_size}")
    source = default_model_path() if tokenizer_source is None else Path(tokenizer_source)
    batches = _batched(requests, batch_size)
    if workers is None:
        return _tokenize_auto(batches, source, auto_pool_workers(os.cpu_count() or 1), batch_size)
    if workers == 1:
        return _tokenize_here(batches, source)
    return _tokenize_in_pool(batches, source, workers)


def _tokenize_auto(
    batches: Iterator[list[Request]], source: Path, pool_workers: int, batch_size: int
) -> Iterator[Request]:
    """In this process; with ``pool_workers``, the batches past the first
    :data:`POOL_AFTER_REQUESTS` requests go to a pool of that many."""
    if pool_workers < 2:
        yield from _tokenize_here(batches, source)
        return
    first = islice(batches, -(-POOL_AFTER_REQUESTS // batch_size))
    yield from _tokenize_here(first, source)
    yield from _tokenize_in_pool(batches, source, pool_workers)


def _tokenize_here(batches: Iterable[list[Request]], source: Path) -> Iterator[Request]:
    tokenizer: ChatTokenizer | None = None
    for batch in batches:
        work = _work_of(batch)
        if work.empty:
            yield from batch
            continue
        if tokenizer is None:
            tokenizer = load_tokenizer(source)
        yield from _rebuild(batch, work, _encode_work(tokenizer, work))


def _tokenize_in_pool(
    batches: Iterator[list[Request]], source: Path, num_workers: int
) -> Iterator[Request]:
    pending: deque[tuple[list[Request], _Work, AsyncResult[_Encoded] | None]] = deque()
    with ExitStack() as stack:
        pool: Pool | None = None
        for batch in batches:
            work = _work_of(batch)
            handle = None
            if not work.empty:
                if pool is None:
                    load_tokenizer(source)  # fail here, clearly, before any worker starts
                    pool = stack.enter_context(_start_pool(source, num_workers))
                handle = pool.apply_async(_encode_in_worker, (work,))
            pending.append((batch, work, handle))
            while len(pending) > _IN_FLIGHT_PER_WORKER * num_workers:
                yield from _finish(*pending.popleft())
        while pending:
            yield from _finish(*pending.popleft())


def _start_pool(source: Path, num_workers: int) -> Pool:
    return multiprocessing.get_context().Pool(
        num_workers, initializer=_init_worker, initargs=(source,)
    )


def _finish(
    batch: list[Request], work: _Work, handle: AsyncResult[_Encoded] | None
) -> Iterator[Request]:
    if handle is None:
        yield from batch
    else:
        yield from _rebuild(batch, work, handle.get())


def prompt_text(tokenizer: ChatTokenizer, prompt: ChatPrompt | TextPrompt) -> str:
    """The text an engine tokenizes for ``prompt``: a completion's text as it is, a chat
    rendered with the model's chat template."""
    if isinstance(prompt, TextPrompt):
        return prompt.text
    return tokenizer.render_chat(prompt.messages, prompt.tools)


def encode_prompt(tokenizer: ChatTokenizer, prompt: ChatPrompt | TextPrompt) -> TokenIds:
    """Token ids of one prompt, as :func:`tokenize_requests` encodes it."""
    return tokenizer.encode(prompt_text(tokenizer, prompt))


def _encode_work(tokenizer: ChatTokenizer, work: _Work) -> _Encoded:
    """Render and encode one batch's prompts and answers."""
    texts: list[str] = []
    for prompt, line in zip(work.prompts, work.source_lines, strict=True):
        try:
            texts.append(prompt_text(tokenizer, prompt))
        except TokenizerError as exc:
            where = f"request at line {line}: " if line is not None else ""
            raise TokenizerError(f"{where}{exc.message}", hint=exc.hint) from exc
    prompt_ids = tokenizer.encode_batch(texts) if texts else []
    output_ids = tokenizer.encode_output(work.outputs) if work.outputs else []
    return _Encoded(prompt_ids=prompt_ids, output_ids=output_ids)


def _work_of(batch: list[Request]) -> _Work:
    work = _Work(prompts=[], prompts_at=[], source_lines=[], outputs=[], outputs_at=[])
    for i, request in enumerate(batch):
        if isinstance(request.prompt, ChatPrompt | TextPrompt):
            work.prompts.append(request.prompt)
            work.prompts_at.append(i)
            work.source_lines.append(request.source_line)
        if request.output_text is not None and request.output_token_ids is None:
            work.outputs.append(request.output_text)
            work.outputs_at.append(i)
    return work


def _rebuild(batch: list[Request], work: _Work, encoded: _Encoded) -> list[Request]:
    out = list(batch)
    for i, ids in zip(work.prompts_at, encoded.prompt_ids, strict=True):
        out[i] = replace(out[i], prompt=TokenPrompt(token_ids=ids))
    for i, ids in zip(work.outputs_at, encoded.output_ids, strict=True):
        output_len = out[i].output_len if out[i].output_len is not None else int(ids.shape[0])
        out[i] = replace(out[i], output_token_ids=ids, output_len=output_len)
    return out


def _batched(requests: Iterable[Request], batch_size: int) -> Iterator[list[Request]]:
    it = iter(requests)
    while batch := list(islice(it, batch_size)):
        yield batch


# Pool workers only. A worker process keeps its tokenizer here, set once by the pool
# initializer; the parent process never reads or writes it.
_WORKER_STATE: dict[str, ChatTokenizer | KvrouteError] = {}


def _init_worker(source: Path) -> None:
    # One core per worker: the pool is the parallelism, not the library's thread pool.
    # This process is a pool worker, so its environment is ours to set.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        _WORKER_STATE["tokenizer"] = load_tokenizer(source)
    except KvrouteError as exc:
        # Raising here would make the pool restart the worker forever; fail the tasks.
        _WORKER_STATE["tokenizer"] = exc


def _encode_in_worker(work: _Work) -> _Encoded:
    tokenizer = _WORKER_STATE["tokenizer"]
    if isinstance(tokenizer, KvrouteError):
        raise tokenizer
    return _encode_work(tokenizer, work)
