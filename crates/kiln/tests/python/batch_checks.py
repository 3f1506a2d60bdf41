"""Checks the Files and Batch APIs and Workers AI's queued requests of a running
`kiln serve` with the official `openai` Python SDK (the Workers AI route through the
standard library's HTTP client): upload, list, retrieve, download and delete files; batches on
chat completions, completions and embeddings, their output and error files matched by
`custom_id`; a malformed line; a file with no valid line; cancel; per-key isolation;
`queueRequest` round trips.

Usage: python batch_checks.py BASE_URL MODEL EMBED_MODEL KEY OTHER_KEY [CHECK...]
(BASE_URL ends in /v1; the server takes both keys.) Prints `ok: <name>` per check or
`FAILED: <name>` and the traceback (the rest still run), then `all batch checks passed`.
"""

import io
import json
import sys
import time

import urllib.error
import urllib.request

import openai
from checklib import run_checks

BASE_URL, MODEL, EMBED_MODEL, KEY, OTHER_KEY = sys.argv[1:6]
ONLY = set(sys.argv[6:])
client = openai.OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0, timeout=300)
other = openai.OpenAI(base_url=BASE_URL, api_key=OTHER_KEY, max_retries=0, timeout=300)
ROOT = BASE_URL[: -len("/v1")]
ENDED = {"completed", "failed", "cancelled", "expired"}


def jsonl(lines):
    return io.BytesIO("".join(l if isinstance(l, str) else json.dumps(l) + "\n" for l in lines).encode())


def upload(lines, name="batch.jsonl", c=client):
    return c.files.create(file=(name, jsonl(lines)), purpose="batch")


def chat_line(cid, text, max_tokens=8):
    return {
        "custom_id": cid,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": MODEL,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
    }


def wait(batch_id, until=ENDED, limit=600):
    deadline = time.time() + limit
    while True:
        b = client.batches.retrieve(batch_id)
        if b.status in until:
            return b
        assert time.time() < deadline, f"batch {batch_id} stuck at {b.status}: {b}"
        time.sleep(0.3)


def lines_of(file_id, c=client):
    text = c.files.content(file_id).text
    return [json.loads(l) for l in text.splitlines() if l.strip()]


def check_files_api():
    content = b'{"custom_id": "x"}\n' * 3
    f = client.files.create(file=("notes.jsonl", io.BytesIO(content)), purpose="user_data")
    assert f.id.startswith("file-") and f.bytes == len(content) and f.purpose == "user_data", f
    assert f.filename == "notes.jsonl" and f.status == "processed", f
    assert client.files.retrieve(f.id).bytes == len(content)
    assert client.files.content(f.id).content == content
    ids = [x.id for x in client.files.list(purpose="user_data")]
    assert f.id in ids, ids
    assert f.id not in [x.id for x in client.files.list(purpose="batch")]
    try:
        client.files.create(file=("x.jsonl", io.BytesIO(b"{}")), purpose="fine-tune")
        raise AssertionError("an unknown purpose was accepted")
    except openai.BadRequestError as e:
        assert "purpose" in str(e), e
    for bad in (lambda: client.files.list(limit=0), lambda: client.batches.list(limit=500)):
        try:
            bad()
            raise AssertionError("an out-of-range limit was accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == "limit", e.body
    deleted = client.files.delete(f.id)
    assert deleted.deleted and deleted.id == f.id, deleted
    try:
        client.files.retrieve(f.id)
        raise AssertionError("a deleted file was found")
    except openai.NotFoundError:
        pass


def check_chat_batch_output_matches_custom_ids():
    prompts = {f"req-{i}": f"Say the number {i}." for i in range(12)}
    f = upload([chat_line(cid, text) for cid, text in prompts.items()])
    b = client.batches.create(
        input_file_id=f.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "numbers"},
    )
    assert b.status == "validating" and b.metadata == {"job": "numbers"}, b
    b = wait(b.id)
    assert b.status == "completed", b
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (12, 12, 0), b
    assert b.error_file_id is None and b.output_file_id, b
    assert b.in_progress_at and b.finalizing_at and b.completed_at, b
    out = lines_of(b.output_file_id)
    assert [o["custom_id"] for o in out] == list(prompts), out
    for o in out:
        assert o["error"] is None and o["response"]["status_code"] == 200, o
        body = o["response"]["body"]
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"], o
        assert body["usage"]["completion_tokens"] <= 8, o
    # The same request sent directly gives the same greedy answer.
    direct = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompts["req-3"]}], max_tokens=8, temperature=0
    )
    assert out[3]["response"]["body"]["choices"][0]["message"]["content"] == direct.choices[0].message.content
    assert b.usage.input_tokens > 0 and b.usage.output_tokens > 0, b.usage
    meta = client.files.retrieve(b.output_file_id)
    assert meta.purpose == "batch_output", meta
    assert b.id in [x.id for x in client.batches.list(limit=100)]


def check_completions_and_embeddings_batches():
    f = upload(
        [
            {"custom_id": "c1", "method": "POST", "url": "/v1/completions",
             "body": {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}},
        ]
    )
    b = wait(client.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h").id)
    assert b.status == "completed" and b.request_counts.completed == 1, b
    body = lines_of(b.output_file_id)[0]["response"]["body"]
    assert body["object"] == "text_completion" and body["choices"][0]["text"], body

    f = upload(
        [
            {"custom_id": "e1", "method": "POST", "url": "/v1/embeddings",
             "body": {"model": EMBED_MODEL, "input": ["a cat", "a dog"]}},
            # A text model cannot embed: the line fails, the batch does not.
            {"custom_id": "e2", "method": "POST", "url": "/v1/embeddings",
             "body": {"model": MODEL, "input": "x"}},
        ]
    )
    b = wait(client.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h").id)
    assert b.status == "completed", b
    assert (b.request_counts.completed, b.request_counts.failed) == (1, 1), b
    body = lines_of(b.output_file_id)[0]["response"]["body"]
    assert len(body["data"]) == 2 and len(body["data"][0]["embedding"]) == 384, body["data"][0].keys()
    err = lines_of(b.error_file_id)
    assert err[0]["custom_id"] == "e2" and err[0]["response"]["status_code"] == 400, err


def check_malformed_lines_go_to_the_error_file():
    good = chat_line("good", "Say hi.")
    bad_max = chat_line("bad-max", "Say hi.")
    bad_max["body"]["max_tokens"] = -5
    lines = [
        good,
        "this is not json\n",
        {"method": "POST", "url": "/v1/chat/completions", "body": {}},
        chat_line("good", "duplicate id"),
        {**chat_line("wrong-url", "x"), "url": "/v1/completions"},
        bad_max,
    ]
    f = upload(lines)
    b = wait(client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h").id)
    assert b.status == "completed", b
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (6, 1, 5), b
    assert [o["custom_id"] for o in lines_of(b.output_file_id)] == ["good"]
    errors = lines_of(b.error_file_id)
    assert len(errors) == 5, errors
    not_json = errors[0]
    assert not_json["response"] is None and not_json["error"]["code"] == "invalid_json", not_json
    assert "line 2" in not_json["error"]["message"], not_json
    codes = [e["error"]["code"] for e in errors[:4]]
    assert codes == ["invalid_json", "missing_custom_id", "duplicate_custom_id", "mismatched_endpoint"], codes
    # A request the endpoint refuses carries the endpoint's own 400 answer.
    refused = errors[4]
    assert refused["custom_id"] == "bad-max" and refused["response"]["status_code"] == 400, refused
    assert refused["response"]["body"]["error"]["param"] == "max_tokens", refused


def check_a_batch_without_valid_lines_fails_validation():
    f = upload(["not json\n", {"custom_id": "a", "method": "GET", "url": "/v1/chat/completions", "body": {}}])
    b = wait(client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h").id)
    assert b.status == "failed" and b.failed_at, b
    assert b.errors and len(b.errors.data) == 2, b.errors
    assert b.errors.data[0].line == 1 and "not JSON" in b.errors.data[0].message, b.errors
    for bad, param in [
        (dict(input_file_id="file-nope", endpoint="/v1/chat/completions"), "input_file_id"),
        (dict(input_file_id=f.id, endpoint="/v1/images"), "endpoint"),
        (dict(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="soon"), "completion_window"),
    ]:
        try:
            client.batches.create(**{"completion_window": "24h", **bad})
            raise AssertionError(f"accepted {bad}")
        except openai.BadRequestError as e:
            assert e.body["param"] == param, e.body


def check_cancel():
    f = upload([chat_line(f"long-{i}", "Write a long story about the sea.", max_tokens=200) for i in range(60)])
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait(b.id, until={"in_progress"} | ENDED)
    c = client.batches.cancel(b.id)
    assert c.status in ("cancelling", "cancelled"), c
    b = wait(b.id)
    assert b.status == "cancelled" and b.cancelled_at, b
    done = b.request_counts.completed + b.request_counts.failed
    assert done < 60, b.request_counts
    if b.output_file_id:
        assert len(lines_of(b.output_file_id)) == b.request_counts.completed
    try:
        client.batches.cancel(b.id)
        raise AssertionError("a cancelled batch was cancelled again")
    except openai.BadRequestError:
        pass


def check_another_key_sees_nothing():
    f = upload([chat_line("mine", "Say yes.")])
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    for call in (
        lambda: other.batches.retrieve(b.id),
        lambda: other.batches.cancel(b.id),
        lambda: other.files.retrieve(f.id),
        lambda: other.files.content(f.id),
        lambda: other.files.delete(f.id),
    ):
        try:
            call()
            raise AssertionError("another key reached this key's batch or file")
        except openai.NotFoundError:
            pass
    try:
        other.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        raise AssertionError("another key's file made a batch")
    except openai.BadRequestError as e:
        assert e.body["param"] == "input_file_id", e.body
    assert b.id not in [x.id for x in other.batches.list()]
    assert f.id not in [x.id for x in other.files.list()]
    wait(b.id)


def ai_run(model, body, key=KEY):
    req = urllib.request.Request(
        f"{ROOT}/ai/run/{model}?queueRequest=true",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_queue_request_round_trip():
    reqs = [
        {"prompt": "Say one.", "max_tokens": 6, "external_reference": "first"},
        {"messages": [{"role": "user", "content": "Say two."}], "max_tokens": 6},
        {"prompt": "Say three.", "max_tokens": -1, "external_reference": "bad"},
    ]
    status, queued = ai_run(MODEL, {"requests": reqs})
    assert status == 200 and queued["success"], queued
    r = queued["result"]
    assert r["status"] == "queued" and r["model"] == MODEL and r["request_id"], queued
    deadline = time.time() + 300
    while True:
        status, polled = ai_run(MODEL, {"request_id": r["request_id"]})
        assert status == 200, polled
        if "responses" in polled["result"]:
            break
        assert polled["result"]["status"] in ("queued", "running"), polled
        assert time.time() < deadline, polled
        time.sleep(0.3)
    res = polled["result"]
    assert [x["id"] for x in res["responses"]] == [0, 1, 2], res
    first, second, bad = res["responses"]
    assert first["success"] and first["external_reference"] == "first" and first["result"]["response"], first
    assert second["success"] and second["external_reference"] is None, second
    assert not bad["success"] and bad["external_reference"] == "bad" and bad["error"], bad
    u = res["usage"]
    assert u["prompt_tokens"] > 0 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
    # Another key, or another model's URL, does not find it.
    status, _ = ai_run(MODEL, {"request_id": r["request_id"]}, key=OTHER_KEY)
    assert status == 404
    status, _ = ai_run(EMBED_MODEL, {"request_id": r["request_id"]})
    assert status == 404
    status, body = ai_run(MODEL, {"requests": []})
    assert status == 400 and body["error"]["param"] == "requests", body


def check_queue_request_on_an_embeddings_model():
    status, queued = ai_run(EMBED_MODEL, {"requests": [{"text": ["a", "b"]}]})
    assert status == 200, queued
    rid = queued["result"]["request_id"]
    deadline = time.time() + 120
    while "responses" not in queued["result"]:
        assert time.time() < deadline, queued
        time.sleep(0.2)
        status, queued = ai_run(EMBED_MODEL, {"request_id": rid})
    resp = queued["result"]["responses"][0]
    assert resp["success"] and len(resp["result"]["data"]) == 2, resp


run_checks(
    [
        ("files_api", check_files_api),
        ("chat_batch_output_matches_custom_ids", check_chat_batch_output_matches_custom_ids),
        ("completions_and_embeddings_batches", check_completions_and_embeddings_batches),
        ("malformed_lines_go_to_the_error_file", check_malformed_lines_go_to_the_error_file),
        ("a_batch_without_valid_lines_fails_validation", check_a_batch_without_valid_lines_fails_validation),
        ("cancel", check_cancel),
        ("another_key_sees_nothing", check_another_key_sees_nothing),
        ("queue_request_round_trip", check_queue_request_round_trip),
        ("queue_request_on_an_embeddings_model", check_queue_request_on_an_embeddings_model),
    ],
    ONLY,
    "batch",
)
