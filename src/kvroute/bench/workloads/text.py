"""Filler text of about a given number of tokens, from word lists and a seeded RNG.

Same idea as :mod:`kvroute.trace.synthetic`, with a larger vocabulary so two unrelated
texts rarely start with the same words (which would add accidental prefix overlap to
a workload built for a target overlap). Lengths are approximate: the
tokens-per-word ratio is measured once per tokenizer, and every generated request is
measured exactly afterwards (:func:`~kvroute.bench.workloads.base.prompt_lengths`).
"""

from __future__ import annotations

import numpy as np

from kvroute.trace.tokenizer import ChatTokenizer

_PROSE_TEXT = """
the a an of to in for on with by from at as is are was were be been this that these
those it its we you they he she our your their order account invoice refund shipping
delivery address payment card plan upgrade cancel renew password login error timeout
request response server client cache memory latency throughput model token prompt
context window batch queue replica gateway route policy health metric please thanks
could would should can will may must need want check update show list find customer
support ticket issue problem status priority agent tool result summary report table data
file record field value number date time week month year today yesterday tomorrow quick
small large fast slow new old first last next previous other same different every
because however therefore also only just still already yet again then when where why how
market price supplier contract warehouse inventory product service region country city
street building floor room office team manager engineer analyst doctor patient teacher
student lesson course exam grade library archive document chapter section paragraph
sentence word letter page volume edition author river mountain forest valley ocean
island coast harbor bridge tunnel road railway station airport flight train ticket
passenger luggage hotel booking guest breakfast kitchen recipe flour sugar butter salt
pepper garlic onion tomato cheese bread coffee energy power voltage current battery
solar wind turbine grid meter sensor signal network packet router switch cable fiber
antenna satellite orbit rocket engine fuel contract clause liability warranty license
patent trademark court judge lawyer hospital clinic nurse medicine dose symptom
diagnosis treatment therapy recovery weather rain snow storm cloud sun temperature
humidity pressure forecast season garden flower tree leaf seed soil water harvest farmer
field tractor fence barn music song melody rhythm guitar piano violin drum concert stage
audience ticket painting canvas color brush museum gallery sculpture statue portrait
landscape history empire king queen war treaty border revolution election vote
parliament science physics chemistry biology experiment theory hypothesis evidence
sample measure observe compare estimate predict verify explain describe analyze design
build test deploy monitor improve reduce increase remove create delete merge split
careful clear simple complex rapid steady bright dark heavy light warm cold quiet
"""
_PROSE = tuple(_PROSE_TEXT.split())

_CODE_TEXT = """
def class return if else elif for while import from self None True False try except
raise with as lambda yield async await print len range dict list set tuple int str float
bool value result items key data config path name index count total buffer offset size
parse load save open close read write append extend update get pop sorted filter map zip
enumerate isinstance super init node tree left right parent child queue stack cache hit
miss block token prompt request response client server handler router logger level debug
info warning error retry timeout deadline worker pool thread lock event signal batch
chunk stream frame header body status code matrix vector shape dtype axis mean std norm
scale weight bias layer model loss step
"""
_CODE = tuple(_CODE_TEXT.split())


class TextSource:
    """Random prose or code-like text from a seeded RNG (the RNG is shared, not copied)."""

    def __init__(self, rng: np.random.Generator, *, tokens_per_word: float = 1.3) -> None:
        self.rng = rng
        self.tokens_per_word = tokens_per_word

    @staticmethod
    def calibrate(tokenizer: ChatTokenizer, num_words: int = 3000) -> float:
        """Tokens per word of this source's prose under ``tokenizer`` (a fixed sample,
        so the ratio, like everything else here, is deterministic)."""
        sample = TextSource(np.random.default_rng(12345)).words(num_words)
        return max(0.5, float(tokenizer.encode(sample).shape[0]) / num_words)

    def words(self, num_words: int, *, code: bool = False) -> str:
        """``num_words`` words; prose gets sentences (capitals, full stops), code lines."""
        vocab = _CODE if code else _PROSE
        picks = self.rng.integers(0, len(vocab), size=max(0, num_words))
        if code:
            lines = [" ".join(vocab[j] for j in picks[i : i + 8]) for i in range(0, len(picks), 8)]
            return "\n    ".join(lines)
        out: list[str] = []
        for i, j in enumerate(picks):
            word = vocab[j]
            out.append(word.capitalize() if i % 12 == 0 else word)
            if i % 12 == 11:
                out[-1] += "."
        text = " ".join(out)
        return text if text.endswith(".") or not text else text + "."

    def tokens(self, num_tokens: int, *, code: bool = False) -> str:
        """Text of about ``num_tokens`` tokens."""
        ratio = self.tokens_per_word * (1.25 if code else 1.0)
        return self.words(max(1, round(num_tokens / ratio)), code=code)

    def tag(self, prefix: str) -> str:
        """A marker unlikely to repeat (``prefix`` + 9 random digits): it starts each
        unique part of a prompt so unrelated prompts diverge right there."""
        return f"{prefix}{int(self.rng.integers(100_000_000, 1_000_000_000))}"
