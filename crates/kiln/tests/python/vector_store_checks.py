"""Checks OpenAI's vector stores and the `file_search` tool of a running `kiln serve`
with the official `openai` Python SDK: upload and attach with `create_and_poll`,
`upload_and_poll` file batches, search with attribute filters, thresholds and limits,
chunking, HTML stripped, paging, attribute updates, detach and delete, failed files,
per-key isolation, 400s naming the field, and `file_search` in a response and in a
chat completion answered from a fact only the files hold.

Usage: python vector_store_checks.py BASE_URL MODEL KEY OTHER_KEY [CHECK...]
(BASE_URL ends in /v1; MODEL is the chat model; the server also serves an embedding
model and takes both keys.) Prints `ok: <name>` per check or `FAILED: <name>` and the
traceback (the rest still run), then `all vector store checks passed`.
"""

import io
import sys

import openai
from checklib import run_checks

BASE_URL, MODEL, KEY, OTHER_KEY = sys.argv[1:5]
ONLY = set(sys.argv[5:])
client = openai.OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0, timeout=300)
other = openai.OpenAI(base_url=BASE_URL, api_key=OTHER_KEY, max_retries=0, timeout=300)

DOCS = {
    "mascot.md": "# Mascot\n\nThe Kiln project mascot is a blue salamander named Ember. "
    "Ember lives inside the kiln and keeps the fire warm.\n",
    "cats.txt": "Cats are small furry pets that purr and chase mice around the barn.\n",
    "pizza.html": "<html><head><script>var secret = 1;</script></head><body><h1>Pizza</h1>"
    "<p>Pizza is a baked flatbread topped with <b>tomato</b> and cheese.</p></body></html>",
    "sushi.md": "Sushi is vinegared rice served with raw fish and seaweed.\n",
}
ATTRS = {
    "mascot.md": {"topic": "project", "year": 2024, "public": True},
    "cats.txt": {"topic": "animals", "year": 2019, "public": True},
    "pizza.html": {"topic": "food", "year": 2021, "public": False},
    "sushi.md": {"topic": "food", "year": 2023, "public": True},
}


def upload(name, text, c=client):
    data = text if isinstance(text, bytes) else text.encode()
    return c.files.create(file=(name, io.BytesIO(data)), purpose="assistants")


def status_of(e):
    return getattr(e, "status_code", None)


def bad_request(fn, param=None):
    """Runs fn, which must fail with a 400 whose `param` is `param` (when given)."""
    try:
        fn()
    except openai.BadRequestError as e:
        if param is not None:
            got = e.body.get("param") if isinstance(e.body, dict) else None
            assert got == param, f"expected param {param}, got {got}: {e.body}"
        return e
    raise AssertionError("expected a 400")


def not_found(fn):
    try:
        fn()
    except openai.NotFoundError:
        return
    raise AssertionError("expected a 404")


_KB = {}


def kb():
    """One store with every doc attached (with attributes), made once."""
    if not _KB:
        vs = client.vector_stores.create(name="kb", metadata={"team": "docs"})
        ids = {}
        for name, text in DOCS.items():
            f = upload(name, text)
            vf = client.vector_stores.files.create_and_poll(
                vector_store_id=vs.id, file_id=f.id, attributes=ATTRS[name]
            )
            assert vf.status == "completed", vf
            assert vf.usage_bytes > 0, vf
            assert vf.attributes == ATTRS[name], vf
            ids[name] = f.id
        _KB.update(vs=vs.id, files=ids)
    return _KB


def names(page):
    return [r.filename for r in page.data]


def check_create_attach_and_search():
    k = kb()
    vs = client.vector_stores.retrieve(k["vs"])
    assert vs.status == "completed", vs
    assert vs.file_counts.completed == 4 and vs.file_counts.total == 4, vs
    assert vs.usage_bytes > 0 and vs.metadata == {"team": "docs"}, vs
    page = client.vector_stores.search(vector_store_id=k["vs"], query="What do cats chase?")
    assert names(page)[0] == "cats.txt", names(page)
    top = page.data[0]
    assert "mice" in top.content[0].text and top.content[0].type == "text", top
    assert top.file_id == k["files"]["cats.txt"] and top.attributes == ATTRS["cats.txt"], top
    scores = [r.score for r in page.data]
    assert scores == sorted(scores, reverse=True), scores
    # HTML is stripped to its text: no tags, no script.
    page = client.vector_stores.search(vector_store_id=k["vs"], query="flatbread with tomato")
    pizza = page.data[0]
    assert pizza.filename == "pizza.html", names(page)
    text = pizza.content[0].text
    assert "tomato" in text and "<" not in text and "secret" not in text, text


def check_filters_thresholds_and_limits():
    k = kb()
    search = lambda **kw: client.vector_stores.search(vector_store_id=k["vs"], query="food", **kw)
    got = names(search(filters={"type": "eq", "key": "topic", "value": "food"}))
    assert sorted(got) == ["pizza.html", "sushi.md"], got
    got = names(search(filters={"type": "and", "filters": [
        {"type": "eq", "key": "topic", "value": "food"},
        {"type": "eq", "key": "public", "value": True}]}))
    assert got == ["sushi.md"], got
    got = names(search(filters={"type": "or", "filters": [
        {"type": "lt", "key": "year", "value": 2020},
        {"type": "eq", "key": "topic", "value": "project"}]}))
    assert sorted(got) == ["cats.txt", "mascot.md"], got
    got = names(search(filters={"type": "in", "key": "year", "value": [2021, 2024]}))
    assert sorted(got) == ["mascot.md", "pizza.html"], got
    got = names(search(filters={"type": "ne", "key": "topic", "value": "food"}))
    assert sorted(got) == ["cats.txt", "mascot.md"], got
    assert len(search(max_num_results=1).data) == 1
    assert search(ranking_options={"score_threshold": 0.99}).data == []
    all_scores = [r.score for r in search().data]
    kept = search(ranking_options={"score_threshold": all_scores[1]}).data
    assert len(kept) >= 2 and all(r.score >= all_scores[1] for r in kept), kept


def check_chunking_and_content():
    sentences = [f"Fact number {i} says the kiln number {i} fires at {1000 + i} degrees." for i in range(120)]
    f = upload("long.txt", " ".join(sentences))
    vs = client.vector_stores.create(name="chunks")
    strategy = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 20}}
    vf = client.vector_stores.files.create_and_poll(
        vector_store_id=vs.id, file_id=f.id, chunking_strategy=strategy
    )
    assert vf.status == "completed", vf
    assert vf.chunking_strategy.static.max_chunk_size_tokens == 100, vf
    page = client.vector_stores.search(vector_store_id=vs.id, query="kiln number 77 fires at", max_num_results=50)
    assert len(page.data) > 10, f"only {len(page.data)} chunks"
    assert all(len(r.content[0].text) < 800 for r in page.data), [len(r.content[0].text) for r in page.data]
    found = " ".join(r.content[0].text for r in page.data)
    missing = [i for i in range(120) if f"fires at {1000 + i} degrees" not in found]
    assert not missing, f"sentences in no chunk: {missing}"
    content = client.vector_stores.files.content(vector_store_id=vs.id, file_id=f.id)
    text = "".join(part.text for part in content)
    assert text == " ".join(sentences), text[:200]
    # Auto chunks fit the embedder (all-minilm-l6-v2 reads 256 tokens with its two specials).
    vf = client.vector_stores.files.create(vector_store_id=vs.id, file_id=upload("again.txt", "x").id)
    assert vf.chunking_strategy.static.max_chunk_size_tokens == 254, vf
    client.vector_stores.delete(vs.id)


def check_file_batches():
    vs = client.vector_stores.create(name="batch")
    files = [("a.md", io.BytesIO(b"Alpha is the first letter.")), ("b.md", io.BytesIO(b"Beta comes second."))]
    batch = client.vector_stores.file_batches.upload_and_poll(vector_store_id=vs.id, files=files)
    assert batch.status == "completed", batch
    assert batch.file_counts.completed == 2 and batch.file_counts.total == 2, batch
    listed = client.vector_stores.file_batches.list_files(vector_store_id=vs.id, batch_id=batch.id)
    assert len(listed.data) == 2 and all(f.status == "completed" for f in listed.data), listed
    again = client.vector_stores.file_batches.retrieve(vector_store_id=vs.id, batch_id=batch.id)
    assert again.id == batch.id and again.status == "completed"
    page = client.vector_stores.search(vector_store_id=vs.id, query="which letter is first?")
    assert names(page)[0] == "a.md", names(page)
    client.vector_stores.delete(vs.id)


def check_paging_update_detach_and_delete():
    made = [client.vector_stores.create(name=f"page-{i}") for i in range(3)]
    first = client.vector_stores.list(limit=2, order="desc")
    assert first.has_more and len(first.data) == 2, first
    ids = [s.id for s in client.vector_stores.list(order="asc", limit=100)]
    assert ids.index(made[0].id) < ids.index(made[2].id), ids
    after = client.vector_stores.list(limit=100, order="asc", after=made[0].id)
    assert made[0].id not in [s.id for s in after.data] and made[1].id in [s.id for s in after.data]
    renamed = client.vector_stores.update(made[0].id, name="renamed", metadata={"k": "v"})
    assert renamed.name == "renamed" and renamed.metadata == {"k": "v"}, renamed
    vs = made[1].id
    f = upload("note.md", "Pelicans carry fish in the pouch under their beak.")
    client.vector_stores.files.create_and_poll(vector_store_id=vs, file_id=f.id, attributes={"kind": "bird"})
    filt = {"type": "eq", "key": "kind", "value": "fish"}
    assert client.vector_stores.search(vector_store_id=vs, query="pelican", filters=filt).data == []
    updated = client.vector_stores.files.update(vector_store_id=vs, file_id=f.id, attributes={"kind": "fish"})
    assert updated.attributes == {"kind": "fish"}, updated
    assert names(client.vector_stores.search(vector_store_id=vs, query="pelican", filters=filt)) == ["note.md"]
    done = client.vector_stores.files.list(vector_store_id=vs, filter="completed")
    assert [x.id for x in done.data] == [f.id], done
    deleted = client.vector_stores.files.delete(vector_store_id=vs, file_id=f.id)
    assert deleted.deleted and deleted.id == f.id, deleted
    assert client.vector_stores.search(vector_store_id=vs, query="pelican").data == []
    not_found(lambda: client.vector_stores.files.retrieve(vector_store_id=vs, file_id=f.id))
    # The uploaded file itself stays.
    assert client.files.retrieve(f.id).id == f.id
    for s in made:
        d = client.vector_stores.delete(s.id)
        assert d.deleted and d.object == "vector_store.deleted", d
        not_found(lambda: client.vector_stores.retrieve(s.id))


def check_unreadable_files_fail_with_a_reason():
    vs = client.vector_stores.create(name="bad-files")
    latin1 = upload("latin1.txt", b"caf\xe9 au lait")
    vf = client.vector_stores.files.create_and_poll(vector_store_id=vs.id, file_id=latin1.id)
    assert vf.status == "failed" and vf.last_error.code == "unsupported_file", vf
    assert "UTF-8" in vf.last_error.message, vf.last_error
    pdf = upload("report.pdf", b"%PDF-1.7 ...")
    vf = client.vector_stores.files.create_and_poll(vector_store_id=vs.id, file_id=pdf.id)
    assert vf.status == "failed" and ".pdf" in vf.last_error.message, vf
    empty = upload("empty.html", "<p>   </p>")
    vf = client.vector_stores.files.create_and_poll(vector_store_id=vs.id, file_id=empty.id)
    assert vf.status == "failed" and vf.last_error.code == "invalid_file", vf
    counts = client.vector_stores.retrieve(vs.id).file_counts
    assert counts.failed == 3 and counts.total == 3, counts
    client.vector_stores.delete(vs.id)


def check_bad_input_names_the_field():
    k = kb()
    vs = k["vs"]
    not_found(lambda: client.vector_stores.retrieve("vs_nope"))
    not_found(lambda: client.vector_stores.search(vector_store_id="vs_nope", query="x"))
    bad_request(lambda: client.vector_stores.files.create(vector_store_id=vs, file_id="file-nope"), "file_id")
    bad_request(lambda: client.vector_stores.create(file_ids=["file-nope"]), "file_ids[0]")
    bad_request(lambda: client.vector_stores.search(vector_store_id=vs, query="x", filters={"type": "like", "key": "a", "value": 1}), "filters.type")
    bad_request(lambda: client.vector_stores.search(vector_store_id=vs, query="x", max_num_results=99), "max_num_results")
    bad_request(lambda: client.vector_stores.search(vector_store_id=vs, query=""), "query")
    bad_request(lambda: client.vector_stores.search(vector_store_id=vs, query="x", rewrite_query=True), "rewrite_query")
    big = {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 100}}
    e = bad_request(
        lambda: client.vector_stores.files.create(vector_store_id=vs, file_id=k["files"]["cats.txt"], chunking_strategy=big),
        "chunking_strategy.static.max_chunk_size_tokens",
    )
    assert "254" in str(e), e
    bad_request(lambda: client.vector_stores.files.create(vector_store_id=vs, file_id=k["files"]["cats.txt"], attributes={"a": {"nested": 1}}), "attributes.a")
    bad_request(lambda: client.vector_stores.create(expires_after={"anchor": "created_at", "days": 1}), "expires_after.anchor")
    bad_request(lambda: client.vector_stores.files.list(vector_store_id=vs, filter="sleeping"), "filter")


def check_other_keys_see_nothing():
    k = kb()
    not_found(lambda: other.vector_stores.retrieve(k["vs"]))
    not_found(lambda: other.vector_stores.search(vector_store_id=k["vs"], query="cats"))
    not_found(lambda: other.vector_stores.files.list(vector_store_id=k["vs"]))
    not_found(lambda: other.vector_stores.delete(k["vs"]))
    assert k["vs"] not in [s.id for s in other.vector_stores.list(limit=100).data]
    # Nor attach another key's file to its own store.
    mine = other.vector_stores.create(name="theirs")
    bad_request(lambda: other.vector_stores.files.create(vector_store_id=mine.id, file_id=k["files"]["cats.txt"]), "file_id")
    other.vector_stores.delete(mine.id)


QUESTION = "What is the name of the Kiln project mascot? Answer with its name."


def check_file_search_in_a_response():
    k = kb()
    tool = {"type": "file_search", "vector_store_ids": [k["vs"]], "max_num_results": 2}
    r = client.responses.create(model=MODEL, input=QUESTION, tools=[tool], temperature=0,
                                include=["file_search_call.results"], max_output_tokens=40)
    assert r.status == "completed", r
    call, message = r.output[0], r.output[-1]
    assert call.type == "file_search_call" and call.status == "completed", call
    assert call.queries == [QUESTION], call
    assert call.results[0].filename == "mascot.md" and "Ember" in call.results[0].text, call.results
    text = message.content[0].text
    assert "Ember" in text, text
    cited = [a.file_id for a in message.content[0].annotations if a.type == "file_citation"]
    assert k["files"]["mascot.md"] in cited, message.content[0].annotations
    # Without `include`, the call says what it searched for but not what it found.
    r = client.responses.create(model=MODEL, input=QUESTION, tools=[tool], temperature=0, max_output_tokens=40)
    assert r.output[0].type == "file_search_call" and r.output[0].results is None, r.output[0]
    # Streamed: the search's events, then the answer and its citation.
    kinds, final = [], None
    with client.responses.stream(model=MODEL, input=QUESTION, tools=[tool], temperature=0, max_output_tokens=40) as s:
        for ev in s:
            kinds.append(ev.type)
        final = s.get_final_response()
    for kind in ["response.file_search_call.in_progress", "response.file_search_call.searching",
                 "response.file_search_call.completed", "response.output_text.annotation.added"]:
        assert kind in kinds, (kind, kinds)
    assert kinds.index("response.file_search_call.completed") < kinds.index("response.output_text.delta")
    assert "Ember" in final.output[-1].content[0].text, final
    bad_request(lambda: client.responses.create(model=MODEL, input="x", tools=[{"type": "file_search"}]), "tools[0].vector_store_ids")
    bad_request(lambda: client.responses.create(model=MODEL, input="x", include=["reasoning.encrypted_content"]), "include[0]")
    not_found(lambda: client.responses.create(model=MODEL, input="x", tools=[{"type": "file_search", "vector_store_ids": ["vs_nope"]}]))


def check_file_search_in_a_chat_completion():
    k = kb()
    tool = {"type": "file_search", "vector_store_ids": [k["vs"]], "max_num_results": 2}
    c = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                       tools=[tool], temperature=0, max_tokens=40)
    m = c.choices[0].message
    assert "Ember" in m.content, m
    assert c.choices[0].finish_reason == "stop", c
    cited = [a.model_extra["file_citation"]["file_id"] for a in m.annotations if a.type == "file_citation"]
    assert k["files"]["mascot.md"] in cited, m
    # The same question without the tool has no passages to answer from.
    plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                           temperature=0, max_tokens=40)
    assert "Ember" not in plain.choices[0].message.content, plain
    assert c.usage.prompt_tokens > plain.usage.prompt_tokens + 20, (c.usage, plain.usage)
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                            tools=[tool], temperature=0, max_tokens=40, stream=True)
    chunks = list(stream)
    first = chunks[0].choices[0].delta
    assert (first.model_extra or {}).get("annotations"), first
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert "Ember" in text, text


run_checks(
    [
        ("create_attach_and_search", check_create_attach_and_search),
        ("filters_thresholds_and_limits", check_filters_thresholds_and_limits),
        ("chunking_and_content", check_chunking_and_content),
        ("file_batches", check_file_batches),
        ("paging_update_detach_and_delete", check_paging_update_detach_and_delete),
        ("unreadable_files_fail_with_a_reason", check_unreadable_files_fail_with_a_reason),
        ("bad_input_names_the_field", check_bad_input_names_the_field),
        ("other_keys_see_nothing", check_other_keys_see_nothing),
        ("file_search_in_a_response", check_file_search_in_a_response),
        ("file_search_in_a_chat_completion", check_file_search_in_a_chat_completion),
    ],
    ONLY,
    "vector store",
)
