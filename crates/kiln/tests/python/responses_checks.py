"""Checks the Responses API of a running `kiln serve` with the official `openai` Python
SDK: chains by previous_response_id, streaming events, function tools, JSON schema
output, stored and unstored responses, input items, delete, background runs and cancel,
re-streaming a response (`retrieve(stream=True, starting_after=...)`),
per-key scoping, remote MCP tools (against `mcp_server.py`), approvals, and errors.

Usage: python responses_checks.py BASE_URL MODEL MCP_URL KEY OTHER_KEY [CHECK...]
(BASE_URL ends in /v1; the server takes both keys; the MCP server wants
`Authorization: Bearer mcp-secret`.) Prints `ok: <name>` per check or `FAILED: <name>`
and the traceback (the rest still run), then `all responses checks passed`.
"""

import json
import socket
import sys
import time

import jsonschema
import openai
from checklib import run_checks

BASE_URL, MODEL, MCP_URL, KEY, OTHER_KEY = sys.argv[1:6]
client = openai.OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0, timeout=300)
other = openai.OpenAI(base_url=BASE_URL, api_key=OTHER_KEY, max_retries=0, timeout=300)
MCP_TOOL = {
    "type": "mcp",
    "server_label": "weather",
    "server_url": MCP_URL,
    "headers": {"Authorization": "Bearer mcp-secret"},
    "require_approval": "never",
}
WEATHER_FN = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def create(**kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("temperature", 0)
    return client.responses.create(**kw)


def items_of(r, kind):
    return [o for o in r.output if o.type == kind]


def expect_status(status, fn):
    try:
        fn()
    except openai.APIStatusError as e:
        assert e.status_code == status, (e.status_code, e.response.text)
        body = e.response.json()["error"]
        assert body["message"], body
        return body
    raise AssertionError(f"expected HTTP {status}")


def basic():
    r = create(input="Say hello in one short sentence.", max_output_tokens=24)
    assert r.id.startswith("resp_"), r.id
    assert r.object == "response" and r.status == "completed", r
    assert r.output_text.strip(), r
    assert r.model == MODEL, r.model
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24, r.usage
    got = client.responses.retrieve(r.id)
    assert got.output_text == r.output_text and got.status == "completed"
    assert r.store is True


def chain():
    r1 = create(
        instructions="You are a helpful assistant. Answer briefly.",
        input="My name is Ada Lovelace. Please remember it.",
        max_output_tokens=32,
    )
    r2 = create(
        previous_response_id=r1.id,
        input="What is my first name? Reply with the name only.",
        max_output_tokens=8,
    )
    assert "Ada" in r2.output_text, r2.output_text
    assert r2.previous_response_id == r1.id
    # The whole conversation was rendered again, and its prefix came from the cache.
    assert r2.usage.input_tokens > r1.usage.input_tokens, (r1.usage, r2.usage)
    assert r2.usage.input_tokens_details.cached_tokens > 0, r2.usage
    r3 = create(previous_response_id=r2.id, input="And my last name?", max_output_tokens=8)
    assert "Lovelace" in r3.output_text, r3.output_text
    items = client.responses.input_items.list(r2.id)
    assert [i.type for i in items.data] == ["message"], items
    assert items.data[0].content[0].text.startswith("What is my first name"), items
    assert items.first_id == items.data[0].id and items.has_more is False


def input_items_paging():
    r = create(
        input=[
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "Say three."},
        ],
        max_output_tokens=4,
    )
    asc = client.responses.input_items.list(r.id, order="asc")
    assert [i.content[0].text for i in asc.data] == ["one", "two", "Say three."], asc
    page = client.responses.input_items.list(r.id, order="asc", limit=2)
    assert len(page.data) == 2 and page.has_more, page
    rest = client.responses.input_items.list(r.id, order="asc", after=page.last_id)
    assert [i.content[0].text for i in rest.data] == ["Say three."], rest
    desc = client.responses.input_items.list(r.id)
    assert desc.data[0].content[0].text == "Say three.", desc


def streaming():
    stream = create(input="Count from one to five in words.", max_output_tokens=40, stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed", kinds
    for k in ["response.output_item.added", "response.content_part.added",
              "response.output_text.delta", "response.output_text.done",
              "response.content_part.done", "response.output_item.done"]:
        assert k in kinds, (k, kinds)
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == final.output_text and text, (text, final.output_text)
    assert client.responses.retrieve(final.id).output_text == text
    # The SDK's stream helper assembles the same response.
    with client.responses.stream(model=MODEL, input="Say yes.", max_output_tokens=8,
                                 temperature=0) as s:
        for _ in s:
            pass
        done = s.get_final_response()
    assert done.status == "completed" and done.output_text, done


def function_tools():
    r = create(input="What is the weather in Paris?", tools=[WEATHER_FN], tool_choice="required")
    calls = items_of(r, "function_call")
    assert len(calls) >= 1, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_"), call
    assert "city" in json.loads(call.arguments), call.arguments
    r2 = create(
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": "It is sunny and 21 C."}],
        max_output_tokens=48,
    )
    assert r2.status == "completed" and r2.output_text, r2.output
    assert "21" in r2.output_text or "sunny" in r2.output_text.lower(), r2.output_text


def function_tools_streaming():
    stream = create(input="Weather in Rome?", tools=[WEATHER_FN], tool_choice="required",
                    stream=True)
    events = list(stream)
    deltas = "".join(e.delta for e in events
                     if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == deltas, (deltas, done)
    final = events[-1].response
    assert items_of(final, "function_call")[0].arguments == deltas


def json_schema_output():
    schema = {"type": "object",
              "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    r = create(input="Name a city in Japan and its country.",
               text={"format": {"type": "json_schema", "name": "place", "schema": schema,
                                "strict": True}},
               max_output_tokens=64)
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


def store_and_delete():
    r = create(input="Say ok.", max_output_tokens=4, store=False)
    assert r.store is False
    expect_status(404, lambda: client.responses.retrieve(r.id))
    r = create(input="Say ok.", max_output_tokens=4)
    d = client.responses.delete(r.id)
    assert d is None or getattr(d, "deleted", True)
    expect_status(404, lambda: client.responses.retrieve(r.id))
    body = expect_status(404, lambda: create(input="hi", previous_response_id=r.id))
    assert body["param"] == "previous_response_id", body
    expect_status(404, lambda: client.responses.delete(r.id))


def key_scoping():
    r = create(input="Say ok.", max_output_tokens=4)
    expect_status(404, lambda: other.responses.retrieve(r.id))
    expect_status(404, lambda: other.responses.delete(r.id))
    expect_status(404, lambda: other.responses.create(model=MODEL, input="hi",
                                                      previous_response_id=r.id))
    assert client.responses.retrieve(r.id).id == r.id


def background():
    r = create(input="Say hi.", max_output_tokens=8, background=True)
    assert r.status in ("queued", "in_progress"), r.status
    for _ in range(600):
        r = client.responses.retrieve(r.id)
        if r.status not in ("queued", "in_progress"):
            break
        time.sleep(0.2)
    # Done: answered, or cut at its 8 tokens.
    assert r.status in ("completed", "incomplete") and r.output_text, r
    long = create(input="Write a very long essay about the history of bread.",
                  max_output_tokens=2000, background=True)
    time.sleep(0.5)
    c = client.responses.cancel(long.id)
    assert c.status == "cancelled", c.status
    assert client.responses.retrieve(long.id).status == "cancelled"
    body = expect_status(400, lambda: client.responses.cancel(r.id))
    assert "cancel" in body["message"], body


def mcp_tools():
    r = create(input="What is the weather in Paris? Use the tool.",
               tools=[dict(MCP_TOOL, allowed_tools=["get_weather"])], tool_choice="required",
               max_tool_calls=1, max_output_tokens=64)
    assert r.status == "completed", (r.status, r.error)
    listed = items_of(r, "mcp_list_tools")
    assert listed and [t.name for t in listed[0].tools] == ["get_weather"], listed
    calls = items_of(r, "mcp_call")
    # One call (the budget), then the model answers without the tool.
    assert len(calls) == 1 and calls[0].name == "get_weather", r.output
    assert calls[0].output.startswith("It is sunny and 21 C in"), calls[0]
    assert calls[0].error is None
    assert r.output[-1].type == "message" and r.output_text, r.output
    # The echoed tool keeps its credentials to itself.
    assert "headers" not in r.tools[0].model_dump(exclude_none=True), r.tools
    stream = create(input="Add 2 and 3 with the tool.",
                    tools=[dict(MCP_TOOL, allowed_tools=["add"])], tool_choice="required",
                    max_tool_calls=1, max_output_tokens=48, stream=True)
    kinds = [e.type for e in stream]
    for k in ["response.mcp_call_arguments.delta", "response.mcp_call.in_progress",
              "response.mcp_call.completed", "response.output_text.delta"]:
        assert k in kinds, (k, kinds)
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds


def mcp_tool_error():
    r = create(input="Call the fail tool.", tools=[dict(MCP_TOOL, allowed_tools=["fail"])],
               tool_choice="required", max_tool_calls=1, max_output_tokens=32)
    calls = items_of(r, "mcp_call")
    assert calls and "fail always fails" in calls[0].error and calls[0].output is None, r.output
    assert r.status in ("completed", "incomplete"), r.status


def mcp_approval():
    tool = dict(MCP_TOOL, allowed_tools=["secret_lookup"], require_approval="always")
    r = create(input="Look up the secret for key alpha.", tools=[tool],
               tool_choice="required", max_output_tokens=32)
    asks = items_of(r, "mcp_approval_request")
    assert asks and asks[0].name == "secret_lookup", r.output
    assert not items_of(r, "mcp_call"), r.output
    r2 = create(previous_response_id=r.id, tools=[tool], max_output_tokens=48,
                input=[{"type": "mcp_approval_response", "approval_request_id": asks[0].id,
                        "approve": True}])
    calls = items_of(r2, "mcp_call")
    assert calls and calls[0].approval_request_id == asks[0].id, r2.output
    assert calls[0].output.startswith("value-of-"), calls[0]


def mcp_unreachable():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tool = dict(MCP_TOOL, server_url=f"http://127.0.0.1:{port}/mcp")
    r = create(input="hi", tools=[tool], max_output_tokens=8)
    assert r.status == "failed", r.status
    assert r.error.code == "mcp_server_unreachable" and str(port) in r.error.message, r.error
    stored = client.responses.retrieve(r.id)
    assert stored.status == "failed" and stored.error.code == r.error.code
    listed = items_of(stored, "mcp_list_tools")
    assert listed and listed[0].error, stored.output
    bad = dict(MCP_TOOL, headers={"Authorization": "Bearer wrong"})
    r = create(input="hi", tools=[bad], max_output_tokens=8)
    assert r.status == "failed" and "401" in r.error.message, r.error


def bad_requests():
    body = expect_status(400, lambda: create(input="hi", tools=[{"type": "web_search"}]))
    assert body["param"] == "tools[0].type", body
    body = expect_status(400, lambda: create(input=[{"role": "robot", "content": "x"}]))
    assert body["param"] == "input[0].role", body
    body = expect_status(400, lambda: create(input="hi", text={"format": {"type": "yaml"}}))
    assert body["param"] == "text.format.type", body
    body = expect_status(400, lambda: create(input="hi", background=True, store=False))
    assert body["param"] == "store", body
    body = expect_status(400, lambda: create(input="hi", temperature=-1))
    assert body["param"] == "temperature", body
    expect_status(404, lambda: create(input="hi", model="no-such-model"))
    expect_status(404, lambda: create(input="hi", previous_response_id="resp_missing"))
    expect_status(404, lambda: client.responses.retrieve("resp_missing"))
    body = expect_status(400, lambda: create(input="hi", max_output_tokens=0))
    assert body["param"] == "max_output_tokens", body


def dump(events):
    return [e.model_dump(mode="json") for e in events]


def restream_stored():
    # Only background responses keep their events (as OpenAI's API has it).
    events = list(create(input="Count from one to five in words.", max_output_tokens=24,
                         stream=True))
    rid = events[-1].response.id
    body = expect_status(400, lambda: list(client.responses.retrieve(rid, stream=True)))
    assert body["param"] == "stream", body
    body = expect_status(400, lambda: client.responses.retrieve(rid, stream=True,
                                                                starting_after=-1))
    assert body["param"] == "starting_after", body
    expect_status(404, lambda: other.responses.retrieve(rid, stream=True))
    expect_status(404, lambda: client.responses.retrieve("resp_missing", stream=True))


def restream_background():
    # Long enough to be still running when it is resumed.
    r = create(input="Count from 1 to 1000, one number per line, and nothing else.",
               max_output_tokens=2000, background=True)
    first = []
    stream = client.responses.retrieve(r.id, stream=True)
    for e in stream:
        first.append(e)
        if e.type == "response.output_text.delta":
            break
    stream.close()
    now = client.responses.retrieve(r.id)
    assert now.status in ("queued", "in_progress"), now.status
    k = first[-1].sequence_number
    rest = list(client.responses.retrieve(r.id, stream=True, starting_after=k))
    assert rest[0].sequence_number == k + 1, rest[0]
    assert rest[-1].type in ("response.completed", "response.incomplete"), rest[-1].type
    seen = first + rest
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    final = client.responses.retrieve(r.id)
    assert final.status == rest[-1].response.status and text == final.output_text and text
    assert dump(client.responses.retrieve(r.id, stream=True)) == dump(seen)
    # Resumed after event k once stored: exactly the tail.
    for k in (0, 3, len(seen) - 2, len(seen) - 1):
        tail = list(client.responses.retrieve(r.id, stream=True, starting_after=k))
        assert dump(tail) == dump(seen[k + 1:]), k


def background_stream():
    # Created streamed: the caller follows the run; leaving does not stop it, and the
    # rest is re-streamed from where it left.
    stream = create(input="Count from 1 to 1000, one number per line, and nothing else.",
                    max_output_tokens=2000, background=True, stream=True)
    first = []
    for e in stream:
        first.append(e)
        if e.type == "response.output_text.delta":
            break
    stream.close()
    assert first[0].type == "response.created" and first[0].sequence_number == 0, first[0]
    rid = first[0].response.id
    assert first[0].response.background is True
    assert client.responses.retrieve(rid).status in ("queued", "in_progress")
    k = first[-1].sequence_number
    rest = list(client.responses.retrieve(rid, stream=True, starting_after=k))
    seen = first + rest
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    assert rest[-1].type in ("response.completed", "response.incomplete"), rest[-1].type
    text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    assert text and text == client.responses.retrieve(rid).output_text


CHECKS = [
    ("basic", basic),
    ("chain", chain),
    ("input items paging", input_items_paging),
    ("streaming", streaming),
    ("function tools", function_tools),
    ("function tools streaming", function_tools_streaming),
    ("json schema output", json_schema_output),
    ("store and delete", store_and_delete),
    ("key scoping", key_scoping),
    ("background", background),
    ("mcp tools", mcp_tools),
    ("mcp tool error", mcp_tool_error),
    ("mcp approval", mcp_approval),
    ("mcp unreachable", mcp_unreachable),
    ("bad requests", bad_requests),
    ("restream stored", restream_stored),
    ("restream background", restream_background),
    ("background stream", background_stream),
]
run_checks(CHECKS, set(sys.argv[6:]), "responses")
