"""Message-by-message rendering gives exactly the whole template's text and ids, and
falls back to whole renders where a template is not message-local."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.pretokenize import WordSplit
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer

CONTENTS = [
    "Hello!",
    "  spaced \n",
    "",
    "Answer: 42. Don't panic.\n\nNext line\twith tab",
    "<|im_end|> looks special",
    "<think>hmm</think>ok",
    'json {"a": [1, 2]}',
    "naïve café 🙂",
    "ends in half a special <|im_",  # spliced contents: halves of added tokens at the seams
    "end|> starts with the other half",
    "|>",
]
messages_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant"]),
            "content": st.sampled_from(CONTENTS),
        }
    ),
    min_size=1,
    max_size=6,
)
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]


@pytest.fixture(scope="module")
def base() -> ChatTokenizer:
    return load_tokenizer()


def with_template(base: ChatTokenizer, template: str) -> ChatTokenizer:
    """The default model's tokenizer under another chat template."""
    return ChatTokenizer(
        base.backend,
        name="test",
        chat_template=template,
        bos_token=base.bos_token,
        eos_token=base.eos_token,
        prefix_ids=base.prefix_ids.tolist(),
        suffix_ids=base.suffix_ids.tolist(),
        word_split=WordSplit(None, True),
    )


def assert_exact(prompts: PromptTokens, messages: list[dict[str, Any]], tools: Any) -> None:
    tok = prompts.tokenizer
    body: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {})}
    assert prompts.text(body) == tok.render_chat(messages, tools)
    ids = prompts.token_ids(body)
    assert ids is not None and np.array_equal(ids, tok.encode_chat(messages, tools))


@settings(max_examples=150, deadline=None)
@given(messages=messages_strategy, tools=st.sampled_from([None, TOOLS]))
def test_pieces_equal_the_whole_template(
    base: ChatTokenizer, messages: list[dict[str, Any]], tools: Any
) -> None:
    prompts = PromptTokens(base, check_every=1)
    for _ in range(2):  # cold, then from the memos
        assert_exact(prompts, messages, tools)
    assert prompts.chat.num_check_failures == 0


def test_a_growing_conversation_renders_only_new_messages(base: ChatTokenizer) -> None:
    prompts = PromptTokens(base)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief. " * 300}]
    for turn in range(5):
        messages.append({"role": "user", "content": f"Question {turn}?"})
        assert_exact(prompts, messages, None)
        messages.append({"role": "assistant", "content": f"Answer {turn}."})
    pieces = prompts.chat.pieces(messages, None)
    assert pieces is not None and len(pieces) == len(messages) + 1  # + generation prompt


session_turns = st.lists(
    st.tuples(
        st.sampled_from(["append", "edit", "tools"]),
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["system", "user", "assistant"]),
                "content": st.sampled_from(CONTENTS),
            }
        ),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(turns=session_turns)
def test_a_sessions_prompts_equal_the_whole_template(
    base: ChatTokenizer, turns: list[tuple[str, dict[str, Any], int]]
) -> None:
    """Given the session, a prompt reuses its last prompt's pieces only where it repeats
    its messages and tool list: appended turns, an edited earlier message and a changed
    tool list all give the whole template's ids."""
    prompts = PromptTokens(base, check_every=1 << 40)
    messages: list[dict[str, Any]] = []
    tools: Any = None
    for kind, message, at in turns:
        if kind == "edit" and messages:
            messages[at % len(messages)] = message
        elif kind == "tools":
            tools = None if tools else TOOLS
        else:
            messages.append(message)
        if not messages:
            continue
        body: dict[str, Any] = {"messages": [dict(m) for m in messages]}
        if tools:
            body["tools"] = tools
        ids = prompts.token_ids(body, "session")
        assert ids is not None and np.array_equal(ids, base.encode_chat(messages, tools))


NOT_LOCAL = {
    # the last message is written differently
    "last": "{% for m in messages %}{% if loop.last %}<|im_start|>LAST {{ m['content'] }}"
    "{% else %}<|im_start|>{{ m['role'] }} {{ m['content'] }}{% endif %}<|im_end|>{% endfor %}",
    # every message carries the conversation's length
    "length": "{% for m in messages %}<|im_start|>{{ messages|length }} {{ m['content'] }}"
    "<|im_end|>{% endfor %}",
    # reads the date: a memo would freeze it
    "date": "{{ strftime_now('%Y') }}{% for m in messages %}<|im_start|>{{ m['content'] }}"
    "{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(NOT_LOCAL))
def test_templates_that_are_not_message_local_render_whole(base: ChatTokenizer, name: str) -> None:
    prompts = PromptTokens(with_template(base, NOT_LOCAL[name]))
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert prompts.chat.pieces(messages, None) is None
    assert_exact(prompts, [*messages, {"role": "user", "content": "c d"}], None)


def test_content_the_template_changes_is_rendered_not_spliced(base: ChatTokenizer) -> None:
    trims = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
    prompts = PromptTokens(with_template(base, trims))
    messages = [{"role": "user", "content": "  padded  "}, {"role": "assistant", "content": " x "}]
    assert_exact(prompts, messages, None)
    assert prompts.chat.pieces(messages, None) is not None  # still message-local


def test_the_sampled_check_turns_a_wrong_memo_off(base: ChatTokenizer) -> None:
    # Message-local on the probes, but a word in a later message changes an earlier one.
    sneaky = (
        "{% set flag = messages|selectattr('content', 'equalto', 'SWITCH')|list %}"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}{% if flag and loop.first %}!{% endif %}"
        "\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )
    prompts = PromptTokens(with_template(base, sneaky), check_every=1)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "SWITCH"}]
    assert_exact(prompts, messages, None)
    assert prompts.chat.num_check_failures == 1
    assert prompts.chat.pieces(messages, None) is None  # off for good
    assert_exact(prompts, messages, None)


LONG = "Rule one applies. " * 40  # 720 characters: looked up by comparison first
LONG_ALIKE = [LONG[:-2] + tail for tail in ("!.", ".!", "..")]  # same length, not equal


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([LONG, *LONG_ALIKE, "Short."]),
            st.sampled_from(["system", "user"]),
            st.sampled_from([None, TOOLS]),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_long_messages_found_by_comparison_are_exact(
    base: ChatTokenizer, prompts_seq: list[tuple[str, str, Any]]
) -> None:
    """Long messages are looked up among the last ones by comparing, not hashing:
    contents of one length that differ in a character, the same text first or later
    in the prompt, with tools or without, never take each other's pieces (more
    distinct long messages than the comparison keeps push the first ones out)."""
    prompts = PromptTokens(base, check_every=1 << 30)
    for content, role, tools in prompts_seq:
        messages = [{"role": role, "content": content}, {"role": "user", "content": content}]
        assert_exact(prompts, messages, tools)
    assert len(prompts.chat._recent) <= 8


def test_a_long_system_prompt_is_encoded_once(base: ChatTokenizer) -> None:
    """A long system prompt before new user messages is made once, then found among
    the last long messages (no memo lookup, so its text is never hashed)."""
    prompts = PromptTokens(base)
    for i in range(20):
        assert_exact(
            prompts,
            [{"role": "system", "content": LONG}, {"role": "user", "content": f"Q{i}?"}],
            None,
        )
    assert prompts.chat.num_misses == 20 + 1  # the 20 user messages, the system prompt once
    prompts.chat._pieces.clear()  # the memo forgets it: the last long messages still hold it
    assert_exact(
        prompts, [{"role": "system", "content": LONG}, {"role": "user", "content": "Q?"}], None
    )
    assert prompts.chat.num_misses == 20 + 1 + 1  # only the new user message
