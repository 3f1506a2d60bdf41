"""Ingestion rate of vector stores on a running `kiln serve` (with an embedding model),
against the embedding model's own throughput on the same text, with the official
`openai` SDK.

Usage: python rag_ingest.py BASE_URL EMBED_MODEL [MAX_BYTES]   (BASE_URL ends in /v1)

The corpus is real Markdown: the package descriptions (`METADATA`) of the Python
installation running this script, up to MAX_BYTES (default 400000). It is uploaded,
attached to a new store as one file batch, and timed from the attach to the batch's
completion (chunks: the store's usage less the text, over 4 bytes times the vector
size). Then the same text, cut into pieces that each fill the model's input, is embedded
through `/v1/embeddings` 32 at a time (as ingestion batches them) and timed. Prints
both rates in chunks per second and their ratio.
"""

import io
import pathlib
import site
import sys
import time

import openai

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
MAX_BYTES = int(sys.argv[3]) if len(sys.argv) > 3 else 400_000
client = openai.OpenAI(base_url=BASE_URL, api_key="bench", max_retries=0, timeout=600)


def corpus():
    """(name, text) of package descriptions, up to MAX_BYTES in all."""
    out, total = [], 0
    roots = site.getsitepackages() + [site.getusersitepackages()]
    for root in roots:
        for meta in sorted(pathlib.Path(root).glob("*.dist-info/METADATA")):
            text = meta.read_text(errors="replace")
            body = text.split("\n\n", 1)[-1]
            if len(body) < 2000:
                continue
            out.append((meta.parent.name + ".md", body))
            total += len(body.encode())
            if total >= MAX_BYTES:
                return out
    return out


docs = corpus()
total_bytes = sum(len(t.encode()) for _, t in docs)
ids = [client.files.create(file=(n, io.BytesIO(t.encode())), purpose="assistants").id for n, t in docs]
vs = client.vector_stores.create(name="bench")
start = time.perf_counter()
batch = client.vector_stores.file_batches.create_and_poll(vector_store_id=vs.id, file_ids=ids,
                                                          poll_interval_ms=50)
ingest_s = time.perf_counter() - start
assert batch.status == "completed" and batch.file_counts.completed == len(ids), batch
dims = len(client.embeddings.create(model=MODEL, input="x").data[0].embedding)
store = client.vector_stores.retrieve(vs.id)
chunks = (store.usage_bytes - total_bytes) // (4 * dims)

# The embedder alone on the same text: pieces that each fill its input (truncated to
# its limit), 32 per request.
text = "\n\n".join(t for _, t in docs)
pieces = [text[i:i + 1400] for i in range(0, len(text), 1400)][:chunks]
start = time.perf_counter()
tokens = 0
for i in range(0, len(pieces), 32):
    r = client.embeddings.create(model=MODEL, input=pieces[i:i + 32], extra_body={"truncate": True})
    tokens += r.usage.prompt_tokens
raw_s = time.perf_counter() - start

print(f"corpus: {len(docs)} files, {total_bytes} bytes, {chunks} chunks")
print(f"ingestion: {ingest_s:.2f} s, {chunks / ingest_s:.1f} chunks/s")
print(f"embedder alone: {len(pieces)} inputs ({tokens / len(pieces):.0f} tokens each) in "
      f"{raw_s:.2f} s, {len(pieces) / raw_s:.1f} inputs/s")
print(f"ratio: {(chunks / ingest_s) / (len(pieces) / raw_s):.2f}")
client.vector_stores.delete(vs.id)
