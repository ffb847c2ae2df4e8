"""Workload generators by name. A fresh registry per call: no module-level state.

Built-ins register through the same path a plugin would; :func:`make_workload` turns a
name and ``--param`` strings into a generator, and an unknown name or parameter is a
:class:`~kvroute.errors.UsageError` listing the valid ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvroute.bench.workloads.agent import AgentWorkload
from kvroute.bench.workloads.base import BenchRequest, GenContext, Workload
from kvroute.bench.workloads.coding import CodeWorkload
from kvroute.bench.workloads.mix import MixWorkload
from kvroute.bench.workloads.multiturn import MultiturnWorkload
from kvroute.bench.workloads.params import ParamInfo, describe, from_params
from kvroute.bench.workloads.qa import QaWorkload
from kvroute.bench.workloads.rag import RagWorkload
from kvroute.bench.workloads.replay import ReplayWorkload
from kvroute.bench.workloads.structured import JsonWorkload
from kvroute.bench.workloads.synth import SynthWorkload
from kvroute.registry import Registry
from kvroute.trace.tokenizer import ChatTokenizer


def workload_registry() -> Registry[type]:
    """Every workload class by name, in the order ``kvroute bench workloads`` lists them."""
    reg: Registry[type] = Registry("workload")
    reg.add("qa", QaWorkload)
    reg.add("rag", RagWorkload)
    reg.add("multiturn", MultiturnWorkload)
    reg.add("agent", AgentWorkload)
    reg.add("json", JsonWorkload)
    reg.add("code", CodeWorkload)
    reg.add("mix", MixWorkload)
    reg.add("replay", ReplayWorkload)
    reg.add("synth", SynthWorkload)
    return reg


def make_workload(name: str, params: Mapping[str, str] | None = None) -> Workload:
    """The generator ``name`` with ``params`` (CLI strings) applied."""
    reg = workload_registry()
    cls = reg.get(name)
    if cls is MixWorkload:
        return from_params(cls, params or {}, workload=name, lookup=make_workload)
    return from_params(cls, params or {}, workload=name)


def workload_params(name: str) -> list[ParamInfo]:
    """The documented parameters of workload ``name``."""
    return describe(workload_registry().get(name))


def generate(
    name: str,
    num_requests: int,
    tokenizer: ChatTokenizer,
    *,
    seed: int = 0,
    params: Mapping[str, str] | None = None,
) -> list[BenchRequest]:
    """Generate ``num_requests`` requests of workload ``name`` (deterministic in ``seed``)."""
    return make_workload(name, params).generate(num_requests, GenContext.seeded(tokenizer, seed))
