"""KV cache capacity from the model and the hardware, or given directly.

KV bytes per token = sum over layers of KV heads x (key dim + value dim) x bytes per
element (``--kv-dtype``; ``auto`` = the model's 16-bit dtype). For MLA models (DeepSeek
V2/V3) a token caches ``kv_lora_rank + qk_rope_head_dim`` elements per layer instead.
The shape comes from a preset, a Hugging Face ``config.json`` or GGUF metadata.

From hardware, as vLLM sizes its pool (SGLang's ``--mem-fraction-static`` works the same)::

    kv_pool_bytes = gpu_memory x num_gpus x utilization - weights - overhead x num_gpus
    capacity      = kv_pool_bytes // kv_bytes_per_token

``overhead`` stands for what the engines measure at start-up (activation peak, CUDA
graphs, the CUDA context); kvroute assumes 2 GiB per GPU unless told. Weights: preset
bytes, the ``*.safetensors`` next to a ``config.json`` (else an estimate from its
shapes), or the GGUF file's size. Presets live in ``presets.json`` next to this module.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kvroute.errors import InputError, KvrouteError, UsageError

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_OVERHEAD_BYTES = 2 * GIB
DEFAULT_UTILIZATION = 0.9

KV_DTYPE_BYTES: dict[str, float] = {
    "auto": 2.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp32": 4.0,
    "fp8": 1.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
}
"""Bytes per KV element by ``--kv-dtype`` (llama.cpp q8_0/q4_0 blocks include their scales)."""


class CapacitySource(enum.Enum):
    TOKENS = "tokens"
    BLOCKS = "blocks"
    HARDWARE = "model_and_gpu"
    UNBOUNDED = "unbounded"


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the KV cache of one model costs per token, and its weights."""

    name: str
    num_layers: int
    kv_elements_per_token: int
    """Sum over layers of KV heads x (key dim + value dim)."""
    weight_bytes: int | None
    source: str
    """Where the shape came from: ``preset``, a config.json path, a GGUF path."""
    weights_estimated: bool = False
    num_params: int | None = None
    """Parameters (the latency predictor's ``2 x P`` FLOPs per token); ``None``: unknown."""
    attn_dim: int | None = None
    """Query heads x head dim: the width the attention FLOPs scale with."""
    hidden_size: int | None = None
    """The residual width (what tensor-parallel all-reduces move per token and layer)."""

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        try:
            per = KV_DTYPE_BYTES[kv_dtype]
        except KeyError:
            valid = ", ".join(KV_DTYPE_BYTES)
            raise UsageError(f"unknown KV dtype '{kv_dtype}' (valid: {valid})") from None
        return max(1, round(self.kv_elements_per_token * per))


@dataclass(frozen=True, slots=True)
class GpuSpec:
    key: str
    name: str
    memory_bytes: int
    mem_bw_bytes_per_s: float | None = None
    """Memory bandwidth; ``None`` where the preset has no speed data (the predictor refuses)."""
    link_bytes_per_s: float | None = None
    """Per-GPU interconnect bandwidth, one direction (NVLink, else PCIe)."""
    dense_flops_per_s: tuple[tuple[str, float], ...] = ()
    """Dense (not 2:4-sparse) tensor FLOP/s by dtype, as (dtype, flops) pairs."""


@dataclass(frozen=True, slots=True)
class Capacity:
    """The KV pool every engine model gets, and how it was derived."""

    tokens: int | None
    """``None``: unbounded."""
    source: CapacitySource
    kv_bytes_per_token: int | None = None
    model: str | None = None
    kv_dtype: str | None = None
    gpu: str | None = None
    num_gpus: int = 1
    gpu_memory_bytes: int | None = None
    utilization: float | None = None
    weight_bytes: int | None = None
    overhead_bytes: int | None = None
    kv_pool_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Presets:
    models: dict[str, ModelShape]
    gpus: dict[str, GpuSpec]


def load_presets() -> Presets:
    """The presets shipped in ``presets.json``."""
    text = resources.files("kvroute.cache").joinpath("presets.json").read_text("utf-8")
    raw = json.loads(text)
    models = {
        key: ModelShape(
            name=key,
            num_layers=m["num_layers"],
            kv_elements_per_token=m["num_layers"] * m["num_kv_heads"] * 2 * m["head_dim"],
            weight_bytes=m["weight_bytes"],
            source=f"preset ({m['hf_id']})",
            num_params=m.get("num_params"),
            attn_dim=m["num_heads"] * m["head_dim"] if "num_heads" in m else None,
            hidden_size=m.get("hidden_size"),
        )
        for key, m in raw["models"].items()
    }
    gpus = {key: _gpu(key, g) for key, g in raw["gpus"].items()}
    return Presets(models, gpus)


def _gpu(key: str, g: dict[str, Any]) -> GpuSpec:
    bw = g.get("mem_bw_gbps")
    link = g.get("link_gbps")
    flops = g.get("dense_tflops", {})
    return GpuSpec(
        key,
        g["name"],
        g["memory_mib"] * MIB,
        mem_bw_bytes_per_s=None if bw is None else float(bw) * 1e9,
        link_bytes_per_s=None if link is None else float(link) * 1e9,
        dense_flops_per_s=tuple((str(k), float(v) * 1e12) for k, v in flops.items()),
    )


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)([bB]?)\s*$")
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str, *, what: str = "size") -> int:
    """``"64k" -> 64000``, ``"1.5M" -> 1500000``, ``"80GiB" -> 80 * 2**30``, ``"80GB" -> 80e9``.

    Decimal suffixes (k, M, G, T) unless followed by ``i`` (binary). Raises ``UsageError``.
    """
    m = _SIZE.match(text)
    if not m:
        raise UsageError(
            f"cannot read {what} '{text}'", hint="use a number like 65536, 64k, 1.5M or 80GiB"
        )
    number, prefix, binary, _unit = m.groups()
    base = 1024 if binary else 1000
    return int(float(number) * base ** _POWERS[prefix.lower()])


def resolve_gpu(spec: str, presets: Presets | None = None) -> GpuSpec:
    """A GPU preset name (see presets.json) or a memory size such as ``80GiB``."""
    p = presets or load_presets()
    key = spec.strip().lower()
    if key in p.gpus:
        return p.gpus[key]
    if re.search(r"[0-9]", key) and key[-1] in "bB":
        return GpuSpec(spec, spec, parse_size(spec, what="GPU memory"))
    valid = ", ".join(sorted(p.gpus))
    raise UsageError(f"unknown GPU '{spec}' (valid: {valid}, or a memory size like 80GiB)")


def resolve_model(spec: str, presets: Presets | None = None) -> ModelShape:
    """A model preset name, a ``config.json`` (or its directory) or a ``.gguf`` file."""
    p = presets or load_presets()
    key = spec.strip().lower()
    if key in p.models:
        return p.models[key]
    path = Path(spec).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return model_from_gguf(path)
    if path.is_dir():
        path = path / "config.json"
    if path.name.endswith(".json") and path.is_file():
        return model_from_hf_config(path)
    valid = ", ".join(sorted(p.models))
    raise UsageError(
        f"unknown model '{spec}' (valid presets: {valid})",
        hint="or give a Hugging Face config.json (or its directory) or a .gguf file",
    )


def _int(cfg: dict[str, Any], key: str, path: Path) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError("expected a positive integer", path=str(path), field=key)
    return value


def model_from_hf_config(path: Path) -> ModelShape:
    """Shape from a Hugging Face ``config.json`` (``text_config`` of multimodal models)."""
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read model config: {exc}", path=str(path)) from None
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object", path=str(path))
    cfg = raw.get("text_config", raw) if "num_hidden_layers" not in raw else raw
    layers = _int(cfg, "num_hidden_layers", path)
    heads = _int(cfg, "num_attention_heads", path)
    hidden = _int(cfg, "hidden_size", path)
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    if cfg.get("kv_lora_rank"):  # MLA: a compressed latent plus the rope part per layer
        per_layer = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 0))
    else:
        per_layer = int(kv_heads) * 2 * int(head_dim)
    weights = sum(f.stat().st_size for f in path.parent.glob("*.safetensors")) or None
    estimated = False
    if weights is None:
        weights, estimated = (
            _estimate_weights(cfg, layers, heads, int(kv_heads), int(head_dim), hidden),
            True,
        )
    return ModelShape(
        name=str(raw.get("_name_or_path") or path.parent.name),
        num_layers=layers,
        kv_elements_per_token=layers * per_layer,
        weight_bytes=weights,
        source=str(path),
        weights_estimated=estimated,
        num_params=_estimate_weights(cfg, layers, heads, int(kv_heads), int(head_dim), hidden) // 2,
        attn_dim=heads * int(head_dim),
        hidden_size=hidden,
    )


def _estimate_weights(
    cfg: dict[str, Any], layers: int, heads: int, kv_heads: int, head_dim: int, hidden: int
) -> int:
    """Dense llama-like parameter count from the config's shapes, times 2 bytes."""
    vocab = int(cfg.get("vocab_size", 0))
    inter = int(cfg.get("intermediate_size", 4 * hidden))
    experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 1)
    moe_inter = int(cfg.get("moe_intermediate_size") or inter)
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * (moe_inter * experts if experts > 1 else inter)
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return 2 * (embed + layers * (attn + mlp))


def model_from_gguf(path: Path) -> ModelShape:
    """Shape from GGUF metadata; the weights are the file's size."""
    from kvroute.trace.gguf import read_gguf_metadata

    try:
        meta = read_gguf_metadata(path)
    except KvrouteError as exc:
        raise InputError(exc.message, path=str(path)) from None
    arch = meta.fields.get("general.architecture")
    if not isinstance(arch, str):
        raise InputError("no general.architecture", path=str(path))

    def num(key: str, default: int | None = None) -> int | list[int]:
        value = meta.fields.get(f"{arch}.{key}", default)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            return [int(v) for v in value]
        raise InputError("missing or not an integer", path=str(path), field=f"{arch}.{key}")

    layers = num("block_count")
    heads = num("attention.head_count")
    embed = num("embedding_length")
    if not isinstance(layers, int) or not isinstance(embed, int):
        raise InputError("expected integers", path=str(path), field=f"{arch}.block_count")
    head_count = heads if isinstance(heads, int) else max(heads)
    kv = num("attention.head_count_kv", head_count)
    kv_per_layer = [kv] * layers if isinstance(kv, int) else kv
    k_len = num("attention.key_length", embed // head_count)
    v_len = num("attention.value_length", k_len if isinstance(k_len, int) else None)
    if not isinstance(k_len, int) or not isinstance(v_len, int):
        raise InputError("expected integers", path=str(path), field=f"{arch}.attention.key_length")
    return ModelShape(
        name=str(meta.fields.get("general.name") or path.stem),
        num_layers=layers,
        kv_elements_per_token=sum(kv_per_layer) * (k_len + v_len),
        weight_bytes=path.stat().st_size,
        source=str(path),
    )


def capacity_from_hardware(
    model: ModelShape,
    gpu: GpuSpec,
    *,
    num_gpus: int = 1,
    utilization: float = DEFAULT_UTILIZATION,
    kv_dtype: str = "auto",
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES,
    weight_bytes: int | None = None,
) -> Capacity:
    """The KV pool left on ``num_gpus`` GPUs after weights and overhead.

    Raises ``UsageError`` when the weights are unknown or nothing is left for KV.
    """
    if not 0 < utilization <= 1:
        raise UsageError(f"GPU memory utilization must be in (0, 1], got {utilization}")
    if num_gpus < 1:
        raise UsageError("need at least one GPU")
    weights = weight_bytes if weight_bytes is not None else model.weight_bytes
    if weights is None:
        raise UsageError(f"the weight size of {model.name} is unknown", hint="pass --weights-gib")
    per_token = model.kv_bytes_per_token(kv_dtype)
    usable = int(gpu.memory_bytes * num_gpus * utilization)
    pool = usable - weights - overhead_bytes * num_gpus
    if pool < per_token:
        raise UsageError(
            f"{model.name} ({weights / GIB:.1f} GiB of weights) leaves no KV memory on "
            f"{num_gpus} x {gpu.name} at {utilization:.0%} utilization",
            hint="use more GPUs, a larger GPU, a smaller model, or give --capacity-tokens",
        )
    return Capacity(
        tokens=pool // per_token,
        source=CapacitySource.HARDWARE,
        kv_bytes_per_token=per_token,
        model=model.name,
        kv_dtype=kv_dtype,
        gpu=gpu.name,
        num_gpus=num_gpus,
        gpu_memory_bytes=gpu.memory_bytes,
        utilization=utilization,
        weight_bytes=weights,
        overhead_bytes=overhead_bytes,
        kv_pool_bytes=pool,
    )


def capacity_from_tokens(
    tokens: int | None, *, model: ModelShape | None = None, kv_dtype: str = "auto"
) -> Capacity:
    """A pool given in tokens (``None``: unbounded); the model, when known, gives bytes."""
    if tokens is not None and tokens < 1:
        raise UsageError(f"capacity must be at least 1 token, got {tokens}")
    return Capacity(
        tokens=tokens,
        source=CapacitySource.UNBOUNDED if tokens is None else CapacitySource.TOKENS,
        kv_bytes_per_token=None if model is None else model.kv_bytes_per_token(kv_dtype),
        model=None if model is None else model.name,
        kv_dtype=None if model is None else kv_dtype,
    )


def capacity_from_blocks(
    blocks: int, block_size_tokens: int, *, model: ModelShape | None = None, kv_dtype: str = "auto"
) -> Capacity:
    """A pool given in blocks (vLLM's ``num_gpu_blocks``)."""
    if blocks < 1 or block_size_tokens < 1:
        raise UsageError("blocks and block size must be positive")
    cap = capacity_from_tokens(blocks * block_size_tokens, model=model, kv_dtype=kv_dtype)
    return Capacity(
        tokens=cap.tokens,
        source=CapacitySource.BLOCKS,
        kv_bytes_per_token=cap.kv_bytes_per_token,
        model=cap.model,
        kv_dtype=cap.kv_dtype,
    )
