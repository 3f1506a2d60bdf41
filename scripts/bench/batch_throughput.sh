#!/usr/bin/env bash
# A batch against the engine's saturated throughput, and interactive TTFT during the
# batch against idle, on one `kiln serve` node (issue 18).
#
# Usage: scripts/bench/batch_throughput.sh MODEL [N] [OUT_DIR]
#        (ENDPOINT=completions for a base model without a chat template)
#
# The batch is N short jobs of the kind batches exist for: support tickets to classify,
# each unique (seeded generator below; ~60-token prompts sharing a ~30-token
# instruction, 16 to 48 output tokens; greedy, `ignore_eos`). The probes are 40 short
# ShareGPT chats (prompt <= 128 tokens, prompt + reply <= 320), as interactive users
# would send.
# 1. Server A: `kiln bench serve` runs the N jobs streamed at concurrency 64
#    (= max_num_seqs): the engine's saturated rate. Then the probes one at a time:
#    idle TTFT.
# 2. Server B (fresh, so nothing is in its prefix cache): the same N chats as one
#    batch through `kiln batch` (same bodies, not streamed); while it runs, the same 40
#    probes one at a time: TTFT under the batch.
# Prints both output-token rates and their ratio, and both TTFT medians and theirs.
set -euo pipefail
MODEL=${1:?usage: batch_throughput.sh MODEL [N] [OUT_DIR]}
N=${2:-10000}
OUT=${3:-/tmp/kiln-batch-bench}
KILN=${KILN:-target/release/kiln}
PORT=${PORT:-18950}
ENDPOINT=${ENDPOINT:-chat}
BASE=http://127.0.0.1:$PORT
mkdir -p "$OUT"
rm -rf "$OUT"/data-*

trap 'kill $SERVER $BATCH 2>/dev/null || true' EXIT
SERVER= BATCH=
serve() {
    "$KILN" serve --model "$MODEL" --port "$PORT" --kv-cache-memory 512MiB \
        --data-dir "$OUT/data-$1" --usage-db "$OUT/usage-$1.sqlite3" >"$OUT/serve-$1.log" 2>&1 &
    SERVER=$!
    until curl -sf "$BASE/ready" >/dev/null; do sleep 0.5; done
}

bench() { # workload, concurrency, label, extra args...
    local w=$1 c=$2 label=$3
    shift 3
    "$KILN" bench serve --base-url "$BASE" --model "$MODEL" --tokenizer-model "$MODEL" \
        --workload "$OUT/$w.json" --max-concurrency "$c" --server-pid "$SERVER" \
        --endpoint "$ENDPOINT" --label "$label" --output-json "$OUT/$label.json" "$@" \
        >"$OUT/$label.txt"
}

python3 - "$OUT/big.json" "$N" <<'PY'
import json, random, sys
rng = random.Random(18)
products = ["router", "invoice portal", "mobile app", "smart plug", "thermostat", "laptop dock",
            "password reset", "family plan", "webcam", "cloud backup", "printer", "e-reader"]
problems = ["was charged twice for", "cannot log in to", "keeps disconnecting from",
            "got a refund request rejected for", "sees error code {n} on", "wants to cancel",
            "lost all settings on", "asks how to export data from", "was billed ${n} for",
            "reports the screen flickering on", "cannot pair", "is locked out of"]
moods = ["Please help.", "This is urgent.", "Third time asking.", "Thanks in advance.",
         "Very frustrated.", "No rush."]
reqs = []
for i in range(int(sys.argv[2])):
    text = (f"Customer {rng.randint(1000, 99999)} {rng.choice(problems).format(n=rng.randint(2, 999))} "
            f"the {rng.choice(products)} since {rng.choice(['Monday', 'yesterday', 'last week', 'the update'])}. "
            f"{rng.choice(moods)} Order {rng.randint(10**6, 10**7)}.")
    prompt = ("Classify this support ticket as billing, bug, account or other, then give a "
              f"one-sentence reason.\n\nTicket {i}: {text}")
    reqs.append({"prompt": prompt, "prompt_tokens": len(prompt.split()) * 4 // 3,
                 "output_tokens": rng.randint(16, 48)})
json.dump({"format": "kiln-bench-workload/1", "dataset": "synthetic-support-tickets",
           "tokenizer": "approximate (words x 4/3)", "seed": 18,
           "sampler": "chacha8-seed_from_u64/fisher-yates-lemire",
           "filter": {"min_tokens": 0, "max_prompt_tokens": 0, "max_total_tokens": 0},
           "requests": reqs}, open(sys.argv[1], "w"))
PY

serve a
bench big 64 saturated
bench probe 1 idle --no-warmup --num-prompts 40 --seed 7 --max-prompt-tokens 128 --max-total-tokens 320
kill "$SERVER"; wait "$SERVER" || true

python3 - "$OUT/big.json" "$OUT/big.jsonl" "$MODEL" "$ENDPOINT" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))
chat = sys.argv[4] == "chat"
with open(sys.argv[2], "w") as f:
    for i, r in enumerate(w["requests"]):
        body = {"model": sys.argv[3], "max_tokens": r["output_tokens"], "temperature": 0,
                "ignore_eos": True}
        if chat:
            body["messages"] = [{"role": "user", "content": r["prompt"]}]
        else:
            body["prompt"] = r["prompt"]
        url = "/v1/chat/completions" if chat else "/v1/completions"
        f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url,
                            "body": body}) + "\n")
PY

serve b
start=$(date +%s.%N)
"$KILN" batch "$OUT/big.jsonl" --server "$BASE" --poll-interval 0.5 2>"$OUT/batch.log" &
BATCH=$!
sleep 10
bench probe 1 busy --no-warmup
wait "$BATCH"
end=$(date +%s.%N)
kill "$SERVER"; wait "$SERVER" || true

python3 - "$OUT" "$start" "$end" <<'PY'
import json, sys
out, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
sat, idle, busy = (json.load(open(f"{out}/{n}.json")) for n in ("saturated", "idle", "busy"))
lines = [json.loads(l) for l in open(f"{out}/big.jsonl.output.jsonl")]
tokens = sum(l["response"]["body"]["usage"]["completion_tokens"] for l in lines)
batch_rate = tokens / (end - start)
print(f"saturated: {sat['completed']} requests, {sat['output_throughput']:.1f} output tok/s")
print(f"batch:     {len(lines)} requests, {tokens} tokens in {end - start:.1f} s, "
      f"{batch_rate:.1f} output tok/s, ratio {batch_rate / sat['output_throughput']:.3f}")
i, b = idle["ttft_ms"]["p50"], busy["ttft_ms"]["p50"]
print(f"TTFT p50 idle {i:.1f} ms, during the batch {b:.1f} ms, ratio {b / i:.2f} "
      f"(p90 {idle['ttft_ms']['p90']:.1f} / {busy['ttft_ms']['p90']:.1f} ms)")
PY
