"""Time to first token of a chat whose long system prompt (about TOKENS tokens) was seen
before, on a running `kiln serve`, with the official `openai` SDK; for the prefix cache
across a restart (its disk tier).

Usage: python shared_prompt.py BASE_URL MODEL [TOKENS] [SALT]   (BASE_URL ends in /v1)

Sends one streamed chat request: the system prompt (a fixed text, its first sentence
changed by SALT so a new SALT is a cold prefix) and a short question that differs on
every run. Prints the TTFT and the prompt's cached tokens. Run it once to fill the
cache, restart the server (`kill -9`, same data directory), and run it again with the
same SALT (warm, from disk) and with another (cold).
"""

import sys
import time
import uuid

import openai

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
TOKENS = int(sys.argv[3]) if len(sys.argv) > 3 else 4000
SALT = sys.argv[4] if len(sys.argv) > 4 else "0"
client = openai.OpenAI(base_url=BASE_URL, api_key="bench", max_retries=0, timeout=600)

# About 20 tokens per rule.
rules = [f"Rule {i}: when a customer asks about order {i}, check the ledger first."
         for i in range(TOKENS // 20)]
system = f"Deployment {SALT}. You are the support assistant. " + " ".join(rules)

# Load the model (served lazily) first, so the timed request measures the prefix.
client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                               max_tokens=1)
start = time.perf_counter()
first = None
usage = None
for chunk in client.chat.completions.create(
        model=MODEL, stream=True, temperature=0, max_tokens=8,
        stream_options={"include_usage": True},
        messages=[{"role": "system", "content": system},
                  {"role": "user", "content": f"Question {uuid.uuid4().hex[:8]}: what now?"}]):
    if first is None and chunk.choices and chunk.choices[0].delta.content:
        first = time.perf_counter() - start
    if chunk.usage:
        usage = chunk.usage
cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
print(f"salt {SALT}: prompt {usage.prompt_tokens} tokens, {cached} cached, "
      f"TTFT {first * 1000:.0f} ms")
