"""The HTML report of ``kvroute analyze``: verdict first, then each measure with its chart."""

from __future__ import annotations

from datetime import datetime

from kvroute.analyze.result import AnalysisResult, VerdictLevel
from kvroute.report import fmt
from kvroute.report.analyze.breakdown import breakdown_section
from kvroute.report.analyze.breakers import breakers_section
from kvroute.report.analyze.drift import drift_section
from kvroute.report.charts.dist_blocks import cdf_block, histogram_block, shares_block
from kvroute.report.charts.svg import RefLine, Series, Shape, bar_chart, histogram, line_chart
from kvroute.report.page.html import (
    Block,
    Callout,
    CalloutKind,
    Chart,
    DefinitionList,
    KeyValues,
    Page,
    Paragraph,
    Section,
    Table,
)

DEFINITIONS: tuple[tuple[str, str], ...] = (
    (
        "Prefix overlap (ideal hit)",
        "Share of all prompt tokens that belong to a prefix some earlier request in the trace already had. "
        "It is the hit ratio of an infinite prefix cache that never evicts: an upper bound for every engine.",
    ),
    (
        "Token level / block level",
        "Token level counts any shared prefix length (SGLang's radix cache with page size 1). Block level counts "
        "only whole blocks of --block-size tokens (vLLM's paged cache, 16 tokens on GPU), never a prompt's "
        "partial last block. A hash-only trace knows whole blocks, and a partial last block only when the "
        "whole prompt repeats an earlier one; its own figure (blocks + repeats) counts both.",
    ),
    (
        "LCP",
        "Longest common prefix, in tokens, of a request with any earlier request (exact, not rounded).",
    ),
    (
        "Pairwise LCP",
        "LCP of two requests drawn uniformly at random (pairs from a uniform reservoir sample of requests).",
    ),
    (
        "Shared-prefix group",
        "Requests whose longest reused block-aligned prefix ends at the same block; its saving is the sum of "
        "their reused tokens.",
    ),
    (
        "Continuation share",
        "For a follow-up turn of a session: LCP with the previous turn's prompt plus output, over the prompt length.",
    ),
    (
        "Ideal LRU hit vs capacity",
        "Hit ratio of a least-recently-used block cache of the given size in tokens, from block stack distances "
        "(spatially sampled on long traces, SHARDS).",
    ),
)

_VERDICT_KIND = {
    VerdictLevel.EQUIVALENT: CalloutKind.INFO,
    VerdictLevel.GREY_ZONE: CalloutKind.WARN,
    VerdictLevel.RADIX_PAYS: CalloutKind.GOOD,
}


def _tok(v: float | None) -> str:
    return "n/a" if v is None else fmt.tokens(v)


def _requests_reusing(r: AnalysisResult) -> str:
    """The share of requests reusing a prefix, and the threshold it counts from."""
    ov = r.overlap
    share = fmt.percent(ov.share_requests_with_reuse)
    if not ov.common_prefix_tokens:
        return f"{share} of requests reuse a prefix of an earlier one."
    return (
        f"Every prompt starts with the same {_tok(ov.common_prefix_tokens)} tokens (chat "
        f"template head, common system prompt); {share} of requests reuse more than that."
    )


def _lead(r: AnalysisResult) -> list[Block]:
    ov, tr = r.overlap, r.trace
    lead: list[Block] = [
        Callout(_VERDICT_KIND[r.verdict.level], r.verdict.headline, " ".join(r.verdict.reasons)),
        KeyValues(
            [
                ("trace", f"{tr.path} ({tr.format})"),
                (
                    "requests",
                    fmt.count(tr.num_requests)
                    + (f" ({fmt.count(tr.num_skipped)} invalid skipped)" if tr.num_skipped else ""),
                ),
                ("prompt tokens", fmt.count(ov.prompt_tokens)),
                (
                    "prompts known as",
                    tr.prompt_form
                    + (
                        f", tokenizer {tr.tokenizer}"
                        if tr.tokenizer
                        else f", {tr.block_size_tokens}-token blocks"
                    ),
                ),
                *((f"prefix overlap ({k})", fmt.percent(x)) for k, x in ov.figures()),
                *(
                    [
                        ("warm-up left out", f"{ov.warmup} ({fmt.count(ov.num_warmup_requests)})"),
                        ("prefix overlap from an empty cache", fmt.percent(ov.cold_hit_ratio)),
                    ]
                    if ov.warmup is not None and ov.cold_hit_ratio is not None
                    else []
                ),
                ("analysis time", fmt.duration(r.elapsed_s)),
            ]
        ),
    ]
    if tr.tokenizer_warning is not None:
        # First: every figure on the page depends on it.
        lead.insert(0, Callout(CalloutKind.WARN, "Wrong tokenizer?", tr.tokenizer_warning))
    return lead


def _overlap_section(r: AnalysisResult) -> Section:
    ov = r.overlap
    bars = [(f"ideal, {k}", x) for k, x in ov.figures()]
    if ov.reported_hit_ratio is not None:
        bars.append(("engine-reported", ov.reported_hit_ratio))
    figures = " · ".join(f"{fmt.percent(x)} {k}" for k, x in ov.figures())
    lcp_share = "n/a" if ov.lcp_share.p50 is None else fmt.percent(ov.lcp_share.p50)
    blocks: list[Block] = [
        Paragraph(
            f"{fmt.percent(ov.hit_ratio)} of prompt tokens repeat a prefix seen earlier "
            f"({figures}). {_requests_reusing(r)} "
            f"The median request shares {_tok(ov.lcp_tokens.p50)} tokens "
            f"({lcp_share} of its prompt) with an earlier one; p90 {_tok(ov.lcp_tokens.p90)}."
        )
    ]
    if len(bars) > 2:  # two numbers read better in the sentence above than as a chart
        blocks.append(
            Chart(
                bar_chart(
                    [b[0] for b in bars],
                    [b[1] for b in bars],
                    title="Prompt tokens served from an ideal cache",
                    x_label="measure",
                    y_label="hit ratio",
                    percent=True,
                    horizontal=True,
                )
            )
        )
    overlap_sec = Section(
        "Prefix overlap",
        [
            *blocks,
            histogram_block(
                ov.per_request_hit,
                "Per-request reusable share of the prompt",
                "reusable share",
                percent_x=True,
            ),
            cdf_block(ov.lcp_tokens, "LCP with any earlier request (CDF)", "tokens", "LCP"),
        ],
    )
    return overlap_sec


def _groups_section(r: AnalysisResult) -> Section:
    rows = [
        [
            str(g.rank),
            fmt.count(g.num_requests),
            "< 1 block"
            if g.sub_block
            else f"{fmt.count(g.start_tokens)}–{fmt.count(g.prefix_tokens)}",
            fmt.tokens(g.tokens_saved),
            fmt.percent(g.share_of_reuse),
            " ".join((g.preview_head or "—").split())[:160],
        ]
        for g in r.groups.top
    ]
    group_blocks: list[Block] = [
        Paragraph(
            f"{fmt.count(r.groups.num_groups)} distinct reused segments (a system prompt, a document, a "
            "session's history: text reused by the same set of requests); "
            f"the top {len(r.groups.top)} hold "
            f"{fmt.percent(r.groups.top_share_of_reuse)} of all reuse."
        )
    ]
    if rows:
        group_blocks.append(
            Table(
                [
                    "#",
                    "requests",
                    "tokens (from–to)",
                    "tokens saved",
                    "of reuse",
                    "prefix starts with",
                ],
                rows,
            )
        )
        group_blocks.append(
            Chart(
                bar_chart(
                    # By length: the end offset of a segment says nothing of its size.
                    [
                        f"#{g.rank} ({fmt.tokens(g.prefix_tokens - g.start_tokens)} tok)"
                        for g in r.groups.top
                    ],
                    [g.share_of_reuse for g in r.groups.top],
                    title="Share of all reuse by shared prefix",
                    x_label="prefix",
                    y_label="share of reuse",
                    percent=True,
                    horizontal=True,
                )
            )
        )
    return Section("Shared prefixes", group_blocks)


def _pairs_section(r: AnalysisResult) -> Section:
    pw = r.pairwise
    pair_blocks: list[Block] = [
        Paragraph(
            f"{fmt.count(pw.num_pairs)} pairs from a uniform sample of {fmt.count(pw.num_requests_sampled)} requests; "
            + (
                f"{fmt.percent(pw.share_pairs_sharing_a_prefix)} share at least one block."
                if pw.share_pairs_sharing_a_prefix is not None
                else "too few requests."
            )
        ),
        histogram_block(
            pw.lcp_share,
            "Pairwise LCP over the shorter prompt",
            "LCP share",
            percent_x=True,
            y_label="share of pairs",
        ),
    ]
    return Section("Requests two by two", pair_blocks)


def _sessions_section(r: AnalysisResult) -> Section:
    se = r.sessions
    sess_blocks: list[Block]
    if se.num_sessions:
        sess_blocks = [
            KeyValues(
                [
                    ("sessions", fmt.count(se.num_sessions)),
                    ("requests with a session id", fmt.count(se.num_requests_with_session)),
                    (
                        "turns per session p50 / p90 / max",
                        f"{_tok(se.turns_per_session.p50)} / {_tok(se.turns_per_session.p90)} / {_tok(se.turns_per_session.max)}",
                    ),
                    ("follow-up turns", fmt.count(se.num_followup_turns)),
                    ("mean continuation share", fmt.percent(se.continuation_share.mean)),
                    (
                        "start with the whole previous prompt",
                        "n/a"
                        if se.share_extends_previous_prompt is None
                        else fmt.percent(se.share_extends_previous_prompt),
                    ),
                    (
                        "… plus its output",
                        "n/a (outputs not logged)"
                        if se.share_extends_previous_with_output is None
                        else fmt.percent(se.share_extends_previous_with_output),
                    ),
                ]
            ),
            histogram_block(
                se.continuation_share,
                "How much of a follow-up prompt is the previous turn",
                "continuation share",
                percent_x=True,
            ),
            histogram_block(se.turns_per_session, "Turns per session", "turns"),
        ]
    else:
        sess_blocks = [Paragraph("No session ids in this trace, so turns cannot be linked.")]
    return Section("Multi-turn sessions", sess_blocks)


def _reuse_section(r: AnalysisResult) -> Section:
    ru = r.reuse
    reuse_blocks: list[Block] = [
        Paragraph(
            "How much KV memory catches the reuse: hit ratio of an ideal LRU block cache by "
            "capacity, with FIFO eviction and the optimal (Belady) policy next to it: the gap "
            "from LRU to optimal is what a better policy could win, the gap from optimal to "
            "the infinite cache what more memory would. "
            + (
                "Exact."
                if ru.sample_rate == 1
                else f"Spatially sampled at {fmt.percent(ru.sample_rate, digits=2)} of blocks ({fmt.count(ru.num_sampled_accesses)} accesses)."
            )
            + (
                f" Median distance between reuses: {_tok(ru.distance_tokens_p50)} distinct tokens"
                if ru.distance_tokens_p50 is not None
                else ""
            )
            + (
                f", {fmt.duration(ru.reuse_time_s_p50)} of time."
                if ru.reuse_time_s_p50 is not None
                else "."
            )
        ),
        Chart(
            line_chart(
                [
                    Series("optimal (Belady)", ru.capacity_tokens, ru.optimal_hit_ratio),
                    Series("ideal LRU", ru.capacity_tokens, ru.hit_ratio),
                    Series("FIFO", ru.capacity_tokens, ru.fifo_hit_ratio),
                ],
                title="Hit ratio vs KV cache capacity: LRU, FIFO and optimal eviction",
                x_label="capacity (tokens)",
                y_label="hit ratio",
                log_x=True,
                percent_y=True,
                y_min=0,
                hlines=[RefLine(ru.infinite_hit_ratio, "infinite cache")],
                vlines=[]
                if ru.pool is None
                else [
                    RefLine(
                        ru.pool.capacity_tokens,
                        f"your pool {fmt.capacity(ru.pool.capacity_tokens)}",
                    )
                ],
            )
        ),
    ]
    if ru.pool is not None:
        p = ru.pool
        reuse_blocks.insert(
            1,
            Paragraph(
                f"At your KV pool of {fmt.capacity(p.capacity_tokens)} tokens: LRU "
                f"{fmt.percent(p.lru_hit_ratio)}, FIFO {fmt.percent(p.fifo_hit_ratio)}, optimal "
                f"{fmt.percent(p.optimal_hit_ratio)}, against {fmt.percent(ru.infinite_hit_ratio)} "
                "with unlimited memory"
                + (
                    "; the verdict is decided on the LRU figure."
                    if p.lru_hit_ratio < ru.infinite_hit_ratio
                    else ": the pool holds the whole reuse."
                )
            ),
        )
    if ru.reuse_time_s_hist_counts:
        total = max(sum(ru.reuse_time_s_hist_counts), 1)
        reuse_blocks.append(
            Chart(
                histogram(
                    ru.reuse_time_s_hist_edges,
                    [c / total for c in ru.reuse_time_s_hist_counts],
                    title="Time between reuses of a block",
                    x_label="time since the block was last used",
                    y_label="share of reuses",
                    percent=True,
                    edge_text=fmt.duration,
                )
            )
        )
    return Section("KV capacity and reuse distance", reuse_blocks)


def _shape_section(r: AnalysisResult) -> Section:
    sh = r.shape
    shape_blocks: list[Block] = [
        KeyValues(
            [
                (
                    "prompt tokens p50 / p90 / p99 / max",
                    f"{_tok(sh.prompt_tokens.p50)} / {_tok(sh.prompt_tokens.p90)} / {_tok(sh.prompt_tokens.p99)} / {_tok(sh.prompt_tokens.max)}",
                ),
                (
                    "output tokens p50 / p90",
                    f"{_tok(sh.output_tokens.p50)} / {_tok(sh.output_tokens.p90)}",
                ),
                (
                    "chat / with tools / structured output",
                    f"{fmt.percent(sh.share_chat)} / {fmt.percent(sh.share_with_tools)} / {fmt.percent(sh.share_structured)}",
                ),
                (
                    "duration / mean rate",
                    "n/a"
                    if sh.duration_s is None or sh.mean_rate_per_s is None
                    else f"{fmt.duration(sh.duration_s)} / {sh.mean_rate_per_s:.2f} req/s",
                ),
                (
                    "in flight mean / p90 / max",
                    "n/a (needs end times)"
                    if sh.concurrency is None
                    else f"{sh.concurrency.mean:.1f} / {sh.concurrency.p90:.0f} / {sh.concurrency.max}",
                ),
            ]
        ),
        shares_block(
            "Prompt length mix",
            [m[0] for m in sh.length_mix],
            [m[1] for m in sh.length_mix],
            "share of requests",
        ),
        histogram_block(sh.prompt_tokens, "Prompt length", "tokens"),
        histogram_block(sh.output_tokens, "Output length", "tokens"),
    ]
    if sh.arrivals is not None:
        a = sh.arrivals
        xs = [i * a.bucket_s for i in range(len(a.requests_per_s))]
        shape_blocks.append(
            Chart(
                line_chart(
                    [Series("arrivals", xs, a.requests_per_s, shape=Shape.STEP)],
                    title=f"Arrival rate ({fmt.duration(a.bucket_s)} buckets)",
                    x_label="seconds since first request",
                    y_label="requests / s",
                    y_min=0,
                )
            )
        )
    return Section("Traffic shape", shape_blocks)


def analysis_page(result: AnalysisResult, generated_at: datetime) -> Page:
    """The whole report: verdict and summary first, then one section per measure."""
    return Page(
        title="kvroute analyze: prefix overlap report",
        subtitle=result.trace.path,
        lead=_lead(result),
        sections=[
            _overlap_section(result),
            _groups_section(result),
            *([breakdown_section(result.breakdown)] if result.breakdown is not None else []),
            *([breakers_section(result.breakers)] if result.breakers is not None else []),
            drift_section(result.drift),
            _pairs_section(result),
            _sessions_section(result),
            _reuse_section(result),
            _shape_section(result),
            Section("Definitions", [DefinitionList(DEFINITIONS)]),
        ],
        generated_at=generated_at,
    )
