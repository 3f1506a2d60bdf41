"""Time to first token of a continued conversation on a running `kiln serve`: the
Responses API with `previous_response_id` (the stored conversation is re-rendered and
its prefix found in the prefix cache) against the same conversation with its first
tokens changed (so nothing is cached), with the official `openai` SDK.

Usage: python responses_chain.py BASE_URL MODEL [TURNS] [REPEATS]   (BASE_URL ends in /v1)

Builds a conversation of TURNS turns (each asks for a ~60-token answer to a ~100-token
question), then REPEATS times: one more turn chained to it (warm), and the same
conversation sent whole as input items with a different first sentence in the
instructions (cold). Prints the median TTFT of each, the input and cached tokens, and
the ratio.
"""

import statistics
import sys
import time

import openai

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
TURNS = int(sys.argv[3]) if len(sys.argv) > 3 else 8
REPEATS = int(sys.argv[4]) if len(sys.argv) > 4 else 5
client = openai.OpenAI(base_url=BASE_URL, api_key="bench", max_retries=0, timeout=600)
INSTRUCTIONS = "You are a patient teacher who explains things clearly and briefly."
TOPICS = ["bread", "bridges", "volcanoes", "tides", "bees", "glass", "clocks", "maps",
          "comets", "rivers", "salt", "paper"]


def question(i):
    t = TOPICS[i % len(TOPICS)]
    return (f"Tell me about {t}. Explain where {t} come from, how people have used {t} "
            f"over the centuries, what is surprising about {t}, and one thing a child "
            f"could do to learn more about {t} at home this weekend. Keep it short.")


def ttft(**kw):
    """Seconds to the first text delta, and the final usage."""
    start = time.perf_counter()
    first = None
    usage = None
    for ev in client.responses.create(model=MODEL, stream=True, temperature=0,
                                      max_output_tokens=8, **kw):
        if ev.type == "response.output_text.delta" and first is None:
            first = time.perf_counter() - start
        if ev.type in ("response.completed", "response.incomplete"):
            usage = ev.response.usage
    return first, usage


prev = None
items = []
for i in range(TURNS):
    r = client.responses.create(model=MODEL, instructions=INSTRUCTIONS, input=question(i),
                                previous_response_id=prev, max_output_tokens=60,
                                temperature=0)
    prev = r.id
    items += [{"role": "user", "content": question(i)},
              {"role": "assistant", "content": r.output_text}]

warm, cold = [], []
for k in range(REPEATS):
    q = question(TURNS + k)
    t, wu = ttft(instructions=INSTRUCTIONS, input=q, previous_response_id=prev)
    warm.append(t)
    # The same conversation, its first block changed: nothing of it is cached.
    t, cu = ttft(instructions=f"Session {k}. " + INSTRUCTIONS,
                 input=items + [{"role": "user", "content": q}])
    cold.append(t)
w, c = statistics.median(warm), statistics.median(cold)
print(f"model {MODEL}, {TURNS} turns before, {REPEATS} repeats")
print(f"warm (previous_response_id): input {wu.input_tokens} tokens, "
      f"{wu.input_tokens_details.cached_tokens} cached, median TTFT {w * 1000:.0f} ms")
print(f"cold (same conversation, nothing cached): input {cu.input_tokens} tokens, "
      f"{cu.input_tokens_details.cached_tokens} cached, median TTFT {c * 1000:.0f} ms")
print(f"TTFT saved: {(1 - w / c) * 100:.0f}% ({c / w:.1f}x faster)")
