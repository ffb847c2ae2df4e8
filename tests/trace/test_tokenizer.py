"""ChatTokenizer on the real SmolLM2 GGUF, checked against llama-server's own tokenizer."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from kvroute.engines.paths import llama_server_path
from kvroute.errors import EngineError, TokenizerError
from kvroute.trace.gguf import encode_gguf_metadata, read_gguf_metadata
from kvroute.trace.gguf_bpe import supported_pre_types
from kvroute.trace.tokenizer import ChatTokenizer, cache_dir, default_model_path, load_tokenizer
from kvroute.types import Message

SMOL_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# A tool-aware ChatML template (written for these tests) for the HF-directory path.
TOOL_TEMPLATE = (
    "{%- if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "Call a function with <tool_call>{...}</tool_call>.\n"
    "<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "</tools><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% continue %}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message.get('content') %}{{ message['content'] }}{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    "<tool_call>{{ {'name': call['function']['name'],"
    " 'arguments': call['function']['arguments']} | tojson }}</tool_call>"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": 'Weather <now> & "later" in a city',
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "Zürich, 東京, São Paulo"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["city"],
        },
    },
}
SQL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run_sql",
        "description": "Run one read-only SQL query.\n\nReturns rows as JSON.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        },
    },
}
TOOLS = [WEATHER_TOOL, SQL_TOOL]

CODE = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
\ta, b = b, a + b  # tab-indented on purpose
    return a


if __name__ == "__main__":
    print(fib(90))  # 2880067194370816120
'''

CHATS: list[list[Message]] = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 12345 + 678?"},
        {"role": "assistant", "content": "13023."},
        {"role": "user", "content": "And 3.14159 × 2? Also 1,000,000 vs 1e6 vs 0x1F."},
    ],
    [
        {
            "role": "user",
            "content": "Traduis « bonjour » en 日本語, 한국어 et العربية, s'il te plaît.",
        },
        {"role": "assistant", "content": "こんにちは / 안녕하세요 / مرحبا — voilà !"},
        {"role": "user", "content": "Merci ! Et en हिन्दी ? Ελληνικά; Кириллица; עברית."},
    ],
    [
        {"role": "user", "content": "Emoji: 🙂🙃 👩‍👩‍👧‍👦 🇨🇭 👍🏽 ✈️ and kaomoji (╯°□°)╯︵ ┻━┻"},
        {"role": "assistant", "content": "😂😂😂"},
    ],
    [
        {"role": "system", "content": "You review code."},
        {"role": "user", "content": "Review this:\n```python\n" + CODE + "```"},
        {"role": "assistant", "content": "Use `functools.cache`;   the loop is O(n).\n\n\n"},
        {"role": "user", "content": "    indented\n\n\n\n   trailing spaces   \t\t\n"},
    ],
    [
        {"role": "user", "content": "  leading and trailing  "},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "\n"},
    ],
    [
        {
            "role": "user",
            "content": "I'm sure you'll say it's fine, they've done it, we'd've... DON'T!",
        },
        {"role": "user", "content": "Numbers: ½ ¾ ² ³ ⅷ ١٢٣ ४५६ ௧௨ 2024-06-01T12:34:56Z $1,234.56"},
    ],
    [
        {
            "role": "system",
            "content": "Tools available:\n" + json.dumps(TOOLS, indent=2, ensure_ascii=False),
        },
        {"role": "user", "content": "What's the weather in Zürich for 3 days?"},
        {
            "role": "assistant",
            "content": '{"name": "get_weather", "arguments": {"city": "Zürich", "days": 3}}',
        },
        {"role": "user", "content": "<|im_start|> inside text, and <|im_end|><file_sep>glued"},
    ],
    [
        {
            "role": "user",
            "content": "Weird spaces:\u00a0nbsp,\u2003em,\u3000ideographic,\u200bzwsp.",
        },
        {"role": "assistant", "content": "CRLF\r\nline\rcarriage\x0bvt\x0cff"},
        {"role": "user", "content": "Combining: e\u0301 n\u0303 Å; math: ∑∫√∞ ≤≥ ≠; arrows → ⇒"},
    ],
]

TOOL_CHATS: list[tuple[list[Message], list[dict[str, Any]]]] = [
    (
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Zürich over the next 3 days?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Zürich"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21.5}'},
        ],
        TOOLS,
    ),
    (
        [{"role": "user", "content": "SELECT count(*) FROM orders WHERE total > 1000;"}],
        [SQL_TOOL],
    ),
]

RAW_TEXTS = [
    "",
    " ",
    "   ",
    "\n\n\n",
    "\t \t\n  \n",
    "a",
    " a",
    "Hello world",
    "Hello  world   !",
    "1234567890",
    " 42",
    "abc123def456",
    "x = [1, 22, 333, 4444]",
    "<|im_start|>",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start",
    "text<reponame>more<filename>x<gh_stars>10",
    "'s 't 're 've 'm 'll 'd 'S 'LL",
    "ǅungla ﬁnance ß ẞ ſ",
    "🙂" * 5 + "\u200d" + "👨‍💻",
    "tabs\tand\tnewlines\nmixed \n\t \r\n end",
    CODE,
    json.dumps(TOOLS),
    json.dumps(TOOLS, indent=4, ensure_ascii=False),
    "Ünïcödé ★ ☆ ♠ ♣ 🂡 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
]


def model_path() -> Path:
    path = default_model_path()
    assert path.is_file(), f"{path} missing: run scripts/install-engines model"
    return path


@pytest.fixture(scope="module")
def smol() -> ChatTokenizer:
    return load_tokenizer(model_path())


@pytest.fixture(scope="module")
def tool_tokenizer(smol: ChatTokenizer, tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    """A HF tokenizer directory: SmolLM2's vocabulary with :data:`TOOL_TEMPLATE`."""
    directory = tmp_path_factory.mktemp("hf") / "smol-tools"
    directory.mkdir()
    smol.backend.save(str(directory / "tokenizer.json"))
    config = {
        "chat_template": TOOL_TEMPLATE,
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return load_tokenizer(directory)


def vocab_only_variant(tmp_path: Path, **overrides: Any) -> Path:
    """The default model's metadata, some values replaced, as a vocab-only GGUF."""
    meta = read_gguf_metadata(model_path())
    fields = dict(meta.fields)
    for key, value in overrides.items():
        fields[key.replace("__", ".")] = value
    path = tmp_path / "variant.gguf"
    path.write_bytes(encode_gguf_metadata(replace(meta, fields=fields)))
    return path


# --- paths ---------------------------------------------------------------------------


def test_default_model_path_follows_the_environment() -> None:
    assert default_model_path({"KVROUTE_MODEL": "/m/x.gguf"}) == Path("/m/x.gguf")
    assert default_model_path({"KVROUTE_CACHE": "/c"}) == Path(
        "/c/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    assert cache_dir({"XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/kvroute")
    assert cache_dir({}) == Path.home() / ".cache" / "kvroute"


def test_missing_default_model_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVROUTE_MODEL", "/nonexistent/model.gguf")
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(None)
    assert "scripts/install-engines model" in str(info.value)


def test_llama_server_path_hint(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="scripts/install-engines llamacpp"):
        llama_server_path({"KVROUTE_CACHE": str(tmp_path)})


# --- vocabulary and encoding -----------------------------------------------------------


def test_identity(smol: ChatTokenizer) -> None:
    assert smol.name == "SmolLM2-135M-Instruct.Q4_1"
    assert smol.vocab_size == 49152
    assert smol.bos_token == "<|im_start|>"
    assert smol.eos_token == "<|im_end|>"
    assert smol.prefix_ids.size == 0  # add_bos_token is false for SmolLM2


def test_special_tokens_are_single_ids(smol: ChatTokenizer) -> None:
    expected = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<file_sep>": 5}
    for text, token_id in expected.items():
        assert smol.token_to_id(text) == token_id
        assert smol.encode(text).tolist() == [token_id]
    ids = smol.encode("<|im_start|>user\nhi<|im_end|>\n").tolist()
    assert ids[0] == 1
    assert ids.count(2) == 1
    assert smol.encode("<|im_start").tolist() != [1]


def test_encode_returns_uint32(smol: ChatTokenizer) -> None:
    ids = smol.encode("Hello world")
    assert ids.dtype == np.uint32
    assert ids.tolist() == [19556, 905]
    assert smol.encode("").tolist() == []


def test_digits_are_split_individually(smol: ChatTokenizer) -> None:
    ids = smol.encode("in 2024 or 12345")
    pieces = [smol.decode([i]) for i in ids]
    assert pieces == ["in", " ", "2", "0", "2", "4", " or", " ", "1", "2", "3", "4", "5"]


@pytest.mark.parametrize("text", RAW_TEXTS)
def test_round_trip(smol: ChatTokenizer, text: str) -> None:
    assert smol.decode(smol.encode(text)) == text


def test_encode_batch_matches_encode(smol: ChatTokenizer) -> None:
    batch = smol.encode_batch(RAW_TEXTS)
    assert [ids.tolist() for ids in batch] == [smol.encode(t).tolist() for t in RAW_TEXTS]
    assert all(ids.dtype == np.uint32 for ids in batch)


def test_output_encoding_leaves_control_text_as_text(smol: ChatTokenizer) -> None:
    [ids] = smol.encode_output(["done<|im_end|>"])
    assert 2 not in ids.tolist()
    assert smol.decode(ids) == "done<|im_end|>"
    assert smol.encode_output(["plain 42"])[0].tolist() == smol.encode("plain 42").tolist()


def test_bos_added_when_the_model_asks(tmp_path: Path) -> None:
    tok = load_tokenizer(vocab_only_variant(tmp_path, tokenizer__ggml__add_bos_token=True))
    assert tok.encode("hi").tolist()[0] == 1
    assert tok.encode("").tolist() == [1]
    # The template's own BOS text is dropped so the prompt has one BOS, as llama-server does.
    rendered = tok.render_chat([{"role": "user", "content": "hi"}])
    assert not rendered.startswith("<|im_start|>")
    assert tok.encode(rendered).tolist().count(1) == 3


def test_vocab_only_file_matches_the_model(smol: ChatTokenizer, tmp_path: Path) -> None:
    tok = load_tokenizer(vocab_only_variant(tmp_path))
    assert [tok.encode(t).tolist() for t in RAW_TEXTS] == [
        smol.encode(t).tolist() for t in RAW_TEXTS
    ]


def test_unsupported_pre_type_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="pre-tokenizer type 'deepseek-coder'") as info:
        load_tokenizer(vocab_only_variant(tmp_path, tokenizer__ggml__pre="deepseek-coder"))
    assert "smollm" in str(info.value)
    assert {"smollm", "gpt-2", "llama-bpe", "qwen2"} <= set(supported_pre_types())


def test_unsupported_tokenizer_model(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="tokenizer model 'llama' is not supported"):
        load_tokenizer(vocab_only_variant(tmp_path, tokenizer__ggml__model="llama"))


def test_not_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"<html>not a model</html>")
    with pytest.raises(TokenizerError, match="not a GGUF file"):
        load_tokenizer(path)


def test_hf_directory_without_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path)


def test_hf_directory_encodes_like_the_gguf(
    smol: ChatTokenizer, tool_tokenizer: ChatTokenizer
) -> None:
    assert tool_tokenizer.name == "smol-tools"
    assert tool_tokenizer.vocab_size == smol.vocab_size
    assert [tool_tokenizer.encode(t).tolist() for t in RAW_TEXTS] == [
        smol.encode(t).tolist() for t in RAW_TEXTS
    ]


# --- chat templates --------------------------------------------------------------------


def test_render_system_user_assistant(smol: ChatTokenizer) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
    ]
    assert smol.render_chat(messages) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert smol.render_chat(messages, add_generation_prompt=False).endswith("Hello.<|im_end|>\n")


def test_render_inserts_default_system_prompt(smol: ChatTokenizer) -> None:
    assert smol.render_chat([{"role": "user", "content": "Hi"}]) == (
        f"<|im_start|>system\n{SMOL_DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_smollm_template_ignores_tools(smol: ChatTokenizer) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    assert smol.render_chat(messages, tools=TOOLS) == smol.render_chat(messages)


def test_render_with_tools(tool_tokenizer: ChatTokenizer) -> None:
    messages, tools = TOOL_CHATS[0]
    weather = (
        '{"type": "function", "function": {"name": "get_weather", "description": '
        '"Weather <now> & \\"later\\" in a city", "parameters": {"type": "object", '
        '"properties": {"city": {"type": "string", "description": "Zürich, 東京, São Paulo"}, '
        '"days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["city"]}}}'
    )
    sql = json.dumps(SQL_TOOL)
    assert tool_tokenizer.render_chat(messages, tools) == (
        "<|im_start|>system\nBe brief.\n\nCall a function with <tool_call>{...}</tool_call>.\n"
        f"<tools>\n{weather}\n{sql}\n</tools><|im_end|>\n"
        "<|im_start|>user\nWeather in Zürich over the next 3 days?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Zürich"}}</tool_call>'
        "<|im_end|>\n"
        '<|im_start|>tool\n{"temp_c": 21.5}<|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    without = tool_tokenizer.render_chat(messages)
    assert without.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")


def test_content_parts_are_joined_for_string_templates(smol: ChatTokenizer) -> None:
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    rendered = smol.render_chat([{"role": "user", "content": parts}])
    assert "<|im_start|>user\nfirst\nsecond<|im_end|>" in rendered


def test_template_errors_become_tokenizer_errors(tmp_path: Path, smol: ChatTokenizer) -> None:
    template = (
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    )
    tok = ChatTokenizer(smol.backend, name="t", chat_template=template)
    with pytest.raises(TokenizerError, match="user first"):
        tok.render_chat([{"role": "assistant", "content": "x"}])
    with pytest.raises(TokenizerError, match="does not compile"):
        ChatTokenizer(smol.backend, name="t", chat_template="{% for %}")
    with pytest.raises(TokenizerError, match="has no chat template"):
        ChatTokenizer(smol.backend, name="t", chat_template=None).render_chat([])
    with pytest.raises(TokenizerError, match="TypeError"):
        smol.render_chat([{"role": "user", "content": None}])


def test_template_helpers_match_transformers(smol: ChatTokenizer) -> None:
    template = (
        "{{ messages[0] | tojson }}|{{ {'b': 1, 'a': [1, 2]} | tojson(indent=2, sort_keys=true) }}"
        "|{{ strftime_now('%Y-%m-%d') }}|{{ bos_token }}{{ eos_token }}"
        "{% generation %}|gen{% endgeneration %}"
        "{% for m in messages %}{% if loop.index > 0 %}{% break %}{% endif %}never{% endfor %}"
    )
    tok = ChatTokenizer(
        smol.backend,
        name="t",
        chat_template=template,
        bos_token="<s>",
        eos_token="</s>",
        now=lambda: datetime(2025, 1, 2, 3, 4, 5),
    )
    rendered = tok.render_chat([{"role": "user", "content": "é <b>&</b>"}])
    assert rendered == (
        '{"role": "user", "content": "é <b>&</b>"}|{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}'
        "|2025-01-02|<s></s>|gen"
    )


def test_sandbox_blocks_mutation(smol: ChatTokenizer) -> None:
    tok = ChatTokenizer(
        smol.backend, name="t", chat_template="{{ messages.append(1) }}{{ messages|length }}"
    )
    with pytest.raises(TokenizerError):
        tok.render_chat([{"role": "user", "content": "x"}])


# --- equality with llama.cpp -----------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _healthy(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def running_llama_server(model: Path, log_path: Path, *extra_args: str) -> Iterator[httpx.Client]:
    """Start llama-server on a free port, wait for /health, stop it on exit.

    A missing binary fails the calling test with the install hint.
    """
    try:
        binary = llama_server_path()
    except EngineError as exc:
        pytest.fail(f"{exc} — llama-server is needed for this test")
    port = _free_port()
    args = [str(binary), "-m", str(model), "--port", str(port), "--host", "127.0.0.1"]
    args += ["-c", "2048", "-np", "1", *extra_args]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client:
            deadline = time.monotonic() + 120
            while not _healthy(client):
                if proc.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    pytest.fail(f"llama-server exited with {proc.returncode}:\n{tail}")
                if time.monotonic() > deadline:
                    pytest.fail("llama-server did not become healthy within 120 s")
                time.sleep(0.2)
            yield client
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client | EngineError]:
    """The default model served by llama-server; the error instead when it is not installed.

    The test, not the fixture, turns a missing binary into a failure, so it reads as a
    FAILED test that says how to install the engine rather than a setup error.
    """
    try:
        llama_server_path()
    except EngineError as exc:
        yield exc
        return
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with running_llama_server(model_path(), log) as client:
        yield client


def _server(fixture_value: httpx.Client | EngineError) -> httpx.Client:
    if isinstance(fixture_value, EngineError):
        pytest.fail(f"{fixture_value} — llama-server is needed for this test")
    return fixture_value


def server_tokenize(client: httpx.Client, text: str, *, special: bool = True) -> list[int]:
    body = {"content": text, "add_special": special, "parse_special": special}
    response = client.post("/tokenize", json=body)
    response.raise_for_status()
    tokens: list[int] = response.json()["tokens"]
    return tokens


def comparison_texts(smol: ChatTokenizer, tool_tokenizer: ChatTokenizer) -> list[str]:
    texts = [smol.render_chat(chat) for chat in CHATS]
    texts += [smol.render_chat(chat, add_generation_prompt=False) for chat in CHATS]
    texts += [tool_tokenizer.render_chat(messages, tools) for messages, tools in TOOL_CHATS]
    return texts + RAW_TEXTS


def assert_same_tokens(ours: list[list[int]], theirs: list[list[int]], texts: list[str]) -> None:
    mismatches = [(t, o, s) for t, o, s in zip(texts, ours, theirs, strict=True) if o != s]
    assert not mismatches, f"{len(mismatches)}/{len(texts)} texts differ, first: {mismatches[0]}"


@pytest.mark.engine
@pytest.mark.llamacpp
def test_chat_tokens_equal_llama_server(
    llama_server: httpx.Client | EngineError,
    smol: ChatTokenizer,
    tool_tokenizer: ChatTokenizer,
) -> None:
    client = _server(llama_server)
    texts = comparison_texts(smol, tool_tokenizer)
    assert len(texts) >= 40
    ours = [ids.tolist() for ids in smol.encode_batch(texts)]
    theirs = [server_tokenize(client, text) for text in texts]
    assert_same_tokens(ours, theirs, texts)
    chat_ids = smol.encode_chat(CHATS[1]).tolist()
    assert chat_ids == server_tokenize(client, smol.render_chat(CHATS[1]))


@pytest.mark.engine
@pytest.mark.llamacpp
def test_output_tokens_equal_llama_server_without_specials(
    llama_server: httpx.Client | EngineError, smol: ChatTokenizer
) -> None:
    client = _server(llama_server)
    texts = [*RAW_TEXTS, "answer<|im_end|>", "<|endoftext|><file_sep>"]
    ours = [ids.tolist() for ids in smol.encode_output(texts)]
    theirs = [server_tokenize(client, text, special=False) for text in texts]
    assert_same_tokens(ours, theirs, texts)


@pytest.mark.engine
@pytest.mark.llamacpp
def test_rendered_chats_equal_llama_server_templates(
    llama_server: httpx.Client | EngineError, smol: ChatTokenizer
) -> None:
    """Same text as llama.cpp's own Jinja engine renders.

    Chats ending in an assistant message are left out: llama-server treats that message
    as a prefill to continue (no end-of-turn, no new generation prompt), where
    transformers and vLLM render it as a finished turn, as :meth:`render_chat` does.
    """
    client = _server(llama_server)
    chats = [chat for chat in CHATS if chat[-1]["role"] != "assistant"]
    assert len(chats) >= 5
    for chat in chats:
        response = client.post("/apply-template", json={"messages": chat})
        response.raise_for_status()
        assert smol.render_chat(chat) == response.json()["prompt"]


@pytest.mark.engine
@pytest.mark.llamacpp
@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2", "starcoder"])
def test_other_pre_tokenizers_equal_llama_server(
    pre: str,
    smol: ChatTokenizer,
    tool_tokenizer: ChatTokenizer,
    tmp_path: Path,
) -> None:
    """The same vocabulary split the way llama.cpp splits for another pre-tokenizer type."""
    ours_tok = load_tokenizer(vocab_only_variant(tmp_path, tokenizer__ggml__pre=pre))
    texts = comparison_texts(smol, tool_tokenizer)
    override = f"tokenizer.ggml.pre=str:{pre}"
    log = tmp_path / "server.log"
    with running_llama_server(model_path(), log, "--override-kv", override) as c:
        theirs = [server_tokenize(c, text) for text in texts]
    ours = [ids.tolist() for ids in ours_tok.encode_batch(texts)]
    assert_same_tokens(ours, theirs, texts)


@pytest.mark.engine
@pytest.mark.llamacpp
def test_bos_handling_equals_llama_server(smol: ChatTokenizer, tmp_path: Path) -> None:
    tok = load_tokenizer(vocab_only_variant(tmp_path, tokenizer__ggml__add_bos_token=True))
    texts = [tok.render_chat(chat) for chat in CHATS[:3]] + ["", "hello"]
    override = "tokenizer.ggml.add_bos_token=bool:true"
    log = tmp_path / "server.log"
    with running_llama_server(model_path(), log, "--override-kv", override) as c:
        theirs = [server_tokenize(c, text) for text in texts]
        prompts = []
        for chat in CHATS[:3]:
            response = c.post("/apply-template", json={"messages": chat})
            response.raise_for_status()
            prompts.append(response.json()["prompt"])
    assert [tok.encode(t).tolist() for t in texts] == theirs
    assert prompts == texts[:3]
