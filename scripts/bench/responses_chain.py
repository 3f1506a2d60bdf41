"""Time to first token of a continued conversation on a running `kiln serve`: the
Responses API with `previous_response_id` (the stored conversation is re-rendered and
its prefix found in the prefix cache) against the same conversation with its first
tokens changed (so nothing is cached), with the official `openai` SDK.

Usage: python responses_chain.py BASE_URL MODEL [TURNS] [REPEATS] [--save F | --resume F]
(BASE_URL ends in /v1)

Across a restart: `--save F` builds the conversation, writes its last response id and
items to F and stops; restart the server (`kill -9` it, start it on the same data
directory), then `--resume F` measures. Only the first warm turn after a restart reads
its prefix from the disk tier (later ones find it in RAM), so it is printed on its own.

Builds a conversation of TURNS turns (each asks for a ~60-token answer to a ~100-token
question), then REPEATS times: one more turn chained to it (warm), and the same
conversation sent whole as input items with a different first sentence in the
instructions (cold). Prints the median TTFT of each, the input and cached tokens, and
the ratio.
"""

import json
import statistics
import sys
import time
import uuid

import openai

args = sys.argv[1:]
SAVE = RESUME = None
if "--save" in args:
    SAVE = args.pop(args.index("--save") + 1)
    args.remove("--save")
if "--resume" in args:
    RESUME = args.pop(args.index("--resume") + 1)
    args.remove("--resume")
BASE_URL, MODEL = args[0], args[1]
TURNS = int(args[2]) if len(args) > 2 else 8
REPEATS = int(args[3]) if len(args) > 3 else 5
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
if RESUME:
    with open(RESUME) as f:
        prev, items = json.load(f)
    # Load the model (served lazily) with an unrelated request, so the first warm turn
    # measures the prefix, not the load.
    client.responses.create(model=MODEL, input="Hi", max_output_tokens=1)
else:
    for i in range(TURNS):
        r = client.responses.create(model=MODEL, instructions=INSTRUCTIONS,
                                    input=question(i), previous_response_id=prev,
                                    max_output_tokens=60, temperature=0)
        prev = r.id
        items += [{"role": "user", "content": question(i)},
                  {"role": "assistant", "content": r.output_text}]
if SAVE:
    with open(SAVE, "w") as f:
        json.dump([prev, items], f)
    sys.exit(0)

warm, cold = [], []
for k in range(REPEATS):
    q = question(TURNS + k)
    t, wu = ttft(instructions=INSTRUCTIONS, input=q, previous_response_id=prev)
    warm.append(t)
    # The same conversation, its first block changed: nothing of it is cached.
    t, cu = ttft(instructions=f"Session {uuid.uuid4().hex[:8]}. " + INSTRUCTIONS,
                 input=items + [{"role": "user", "content": q}])
    cold.append(t)
w, c = statistics.median(warm), statistics.median(cold)
print(f"model {MODEL}, {TURNS} turns before, {REPEATS} repeats")
if RESUME:
    print(f"first warm turn after the restart: TTFT {warm[0] * 1000:.0f} ms "
          f"({c / warm[0]:.1f}x faster than cold)")
print(f"warm (previous_response_id): input {wu.input_tokens} tokens, "
      f"{wu.input_tokens_details.cached_tokens} cached, median TTFT {w * 1000:.0f} ms")
print(f"cold (same conversation, nothing cached): input {cu.input_tokens} tokens, "
      f"{cu.input_tokens_details.cached_tokens} cached, median TTFT {c * 1000:.0f} ms")
print(f"TTFT saved: {(1 - w / c) * 100:.0f}% ({c / w:.1f}x faster)")
