"""Multi-turn structure: sessions, turns per session, and how much of each turn's prompt
is the previous turn's prompt plus its output (what a cache that keeps the previous
turn, like SGLang's radix tree after insert-at-finish, can reuse).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from kvroute.stats import Distribution, describe
from kvroute.types import BlockHashes, TokenIds


@dataclass(frozen=True, slots=True)
class SessionsResult:
    num_sessions: int
    num_requests_with_session: int
    turns_per_session: Distribution
    num_followup_turns: int
    continuation_share: Distribution
    """Per follow-up turn: longest common prefix with (previous prompt + previous output) / prompt length."""
    share_extends_previous_prompt: float | None
    """Follow-up turns whose prompt starts with the whole previous prompt."""
    share_extends_previous_with_output: float | None
    """Follow-up turns whose prompt starts with the whole previous prompt plus its output (when outputs are known)."""
    outputs_known: bool


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    neq = np.flatnonzero(a[:n] != b[:n])
    return int(neq[0]) if neq.size else n


class SessionTracker:
    """Keeps the last turn of up to ``max_live_sessions`` sessions (least recently seen evicted)."""

    def __init__(self, *, max_live_sessions: int = 50_000) -> None:
        self.max_live_sessions = max_live_sessions
        self._last: OrderedDict[str, tuple[np.ndarray, int, bool]] = OrderedDict()
        self._turns: dict[str, int] = {}
        self._shares: list[float] = []
        self._ext_prompt = 0
        self._ext_full = 0
        self._with_output = 0
        self._num_with_session = 0

    def add(
        self,
        session_id: str,
        units: TokenIds | BlockHashes,
        num_tokens: int,
        output_units: TokenIds | None,
        unit_tokens: int,
    ) -> int:
        """Record one request. ``units`` are its token ids, or its block hashes for
        hash-only traces (``unit_tokens`` tokens each); ``output_units`` the output tokens.
        Returns how many leading tokens it shares with the session's previous turn
        (prompt and output; 0 for a first turn)."""
        self._num_with_session += 1
        self._turns[session_id] = self._turns.get(session_id, 0) + 1
        prev = self._last.get(session_id)
        shared = 0
        if prev is not None:
            prev_units, prev_prompt_len, has_output = prev
            lcp = _lcp(units, prev_units)
            shared = min(lcp * unit_tokens, num_tokens)
            self._shares.append(shared / max(num_tokens, 1))
            if lcp >= prev_prompt_len:
                self._ext_prompt += 1
            if has_output:
                self._with_output += 1
                if lcp >= prev_units.shape[0]:
                    self._ext_full += 1
            self._last.move_to_end(session_id)
        full = (
            units
            if output_units is None
            else np.concatenate([units, output_units.astype(units.dtype)])
        )
        self._last[session_id] = (full, units.shape[0], output_units is not None)
        if len(self._last) > self.max_live_sessions:
            self._last.popitem(last=False)
        return shared

    def finish(self) -> SessionsResult:
        n_follow = len(self._shares)
        return SessionsResult(
            num_sessions=len(self._turns),
            num_requests_with_session=self._num_with_session,
            turns_per_session=describe(list(self._turns.values()), bins=_turn_bins(self._turns)),
            num_followup_turns=n_follow,
            continuation_share=describe(self._shares, bins=np.linspace(0, 1, 11)),
            share_extends_previous_prompt=self._ext_prompt / n_follow if n_follow else None,
            share_extends_previous_with_output=self._ext_full / self._with_output
            if self._with_output
            else None,
            outputs_known=self._with_output > 0,
        )


def _turn_bins(turns: dict[str, int]) -> np.ndarray:
    top = max(turns.values(), default=1)
    return np.arange(0.5, max(top, 10) + 1.5, 1.0)
