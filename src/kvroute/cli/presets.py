"""``kvroute presets``: the model and GPU presets ``simulate --model/--gpu`` accept."""

from __future__ import annotations

import click
from rich.table import Table

from kvroute.cache.capacity import load_presets
from kvroute.cli.console import make_console
from kvroute.report import fmt


@click.command("presets")
def presets_cmd() -> None:
    """List the model presets (KV bytes per token, weights) and GPU presets (memory)
    that `kvroute simulate --model NAME --gpu NAME` sizes the KV pool from. A model can
    also be a config.json or a .gguf file, a GPU a memory size such as 80GiB."""
    presets = load_presets()
    console = make_console(highlight=False)
    models = Table("model", "from", "layers", "KV per token (16-bit)", "weights", box=None)
    for key, m in presets.models.items():
        models.add_row(
            key,
            m.source.removeprefix("preset (").removesuffix(")"),
            str(m.num_layers),
            fmt.byte_size(m.kv_bytes_per_token()),
            "n/a" if m.weight_bytes is None else fmt.byte_size(m.weight_bytes),
        )
    gpus = Table("gpu", "name", "memory", box=None)
    for key, g in presets.gpus.items():
        gpus.add_row(key, g.name, fmt.byte_size(g.memory_bytes))
    console.print(models)
    console.print()
    console.print(gpus)
