"""Checks a running `kiln serve` with the official `openai` Python SDK.

Usage: python openai_sdk_checks.py BASE_URL MODEL
Exits non-zero (with the failing assertion) when any check fails.
"""

import sys

import openai

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)
MESSAGES = [{"role": "user", "content": "Name three colors."}]


def check(name, fn):
    fn()
    print(f"ok: {name}", flush=True)


def models():
    ids = [m.id for m in client.models.list().data]
    assert MODEL in ids, ids
    m = client.models.retrieve(MODEL)
    assert m.owned_by == "kiln" and m.object == "model", m


def chat():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    assert r.id.startswith("chatcmpl-"), r.id
    assert r.object == "chat.completion" and r.model == MODEL and r.created > 0
    assert r.system_fingerprint and r.system_fingerprint.startswith("fp_"), r.system_fingerprint
    assert len(r.choices) == 1 and r.choices[0].index == 0
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content, c.message
    assert c.finish_reason in ("stop", "length"), c.finish_reason
    assert c.logprobs is None
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 12, u
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens >= 0, u
    # max_completion_tokens caps like max_tokens; a repeated prompt hits the prefix cache.
    again = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_completion_tokens=3, temperature=0)
    assert again.usage.completion_tokens <= 3 and again.choices[0].finish_reason == "length", again
    assert again.usage.prompt_tokens_details.cached_tokens > 0, again.usage


def completions():
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.id.startswith("cmpl-") and r.object == "text_completion", r
    assert len(r.choices) == 1 and r.choices[0].text and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0
    batch = client.completions.create(model=MODEL, prompt=["One, two,", "Red, green,"], max_tokens=4, n=2, temperature=0)
    assert sorted(c.index for c in batch.choices) == [0, 1, 2, 3], batch.choices
    echo = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3, echo=True, temperature=0)
    assert echo.choices[0].text.startswith("Hello"), echo.choices[0].text


def streaming_with_usage():
    full = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert len({ch.id for ch in chunks}) == 1
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.completion_tokens == full.usage.completion_tokens, (last.usage, full.usage)
    assert all(ch.usage is None for ch in chunks[:-1])
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks[:-1] if ch.choices)
    assert text == full.choices[0].message.content, (text, full.choices[0].message.content)
    finishes = [ch.choices[0].finish_reason for ch in chunks[:-1] if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason], finishes
    # Completions stream too.
    parts = list(client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True))
    assert parts[-1].choices[0].finish_reason in ("stop", "length"), parts[-1]


def n_two():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, n=2, temperature=1, seed=3)
    assert sorted(c.index for c in r.choices) == [0, 1], r.choices
    assert all(c.message.content for c in r.choices)
    assert r.usage.completion_tokens > 0, r.usage
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, n=2, stream=True)
    finished = {ch.choices[0].index for ch in stream if ch.choices and ch.choices[0].finish_reason}
    assert finished == {0, 1}, finished


def stop():
    base = client.completions.create(model=MODEL, prompt="Monday, Tuesday, Wednesday,", max_tokens=12, temperature=0)
    text = base.choices[0].text
    assert len(text) >= 6, text
    word = text[3:6]
    cut = text[: text.index(word)]
    stopped = client.completions.create(
        model=MODEL, prompt="Monday, Tuesday, Wednesday,", max_tokens=12, temperature=0, stop=[word, "@@@"]
    )
    assert stopped.choices[0].text == cut, (stopped.choices[0].text, cut, word)
    assert stopped.choices[0].finish_reason == "stop"
    chat_base = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    content = chat_base.choices[0].message.content
    word = content[2:5]
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, stop=word)
    assert r.choices[0].message.content == content[: content.index(word)], (r.choices[0].message.content, word)
    assert r.choices[0].finish_reason == "stop"


def seed():
    kw = dict(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=1.0, seed=1234)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b, (a, b)
    texts = {client.chat.completions.create(**{**kw, "seed": s}).choices[0].message.content for s in range(5)}
    assert len(texts) > 1, texts


def logprobs():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens, (len(content), r.usage)
    for t in content:
        assert t.logprob <= 0 and isinstance(t.token, str) and isinstance(t.bytes, list)
        assert len(t.top_logprobs) == 3
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, t  # greedy picks the top token
        assert t.top_logprobs[0].token == t.token
    c = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=5, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    n = c.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n, lp
    assert all(1 <= len(d) <= 2 for d in lp.top_logprobs), lp.top_logprobs
    assert lp.text_offset == sorted(lp.text_offset), lp.text_offset


def errors():
    try:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.body["code"] == "model_not_found", e.body
    try:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, n=0)
        raise AssertionError("n=0 accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "n", e.body


for name, fn in [
    ("models", models),
    ("chat", chat),
    ("completions", completions),
    ("streaming with usage", streaming_with_usage),
    ("n=2", n_two),
    ("stop", stop),
    ("seed", seed),
    ("logprobs", logprobs),
    ("errors", errors),
]:
    check(name, fn)
print("all openai SDK checks passed")
