"""Writes an F16 GGUF with random weights at the real shapes of a popular model, for
benchmarks of the Q4_K-dominant formats no catalogue model has (rows 1536-4096 wide).
Speed depends on shapes and types, not on the values, so random weights measure what
a real download would. Quantize the result with the peer's tool, outside the repo:

    python scripts/bench/random_gguf.py qwen2.5-1.5b TOKENIZER.gguf /tmp/qwen15-f16.gguf
    llama-quantize /tmp/qwen15-f16.gguf /tmp/qwen15-q4km.gguf Q4_K_M

TOKENIZER.gguf lends its tokenizer and chat template: the Qwen2.5-Coder-0.5B catalogue
file (`kiln pull qwen2.5-coder-0.5b-instruct`), whose 151,936-token vocabulary is
Qwen2.5's. `llama-3.2-3b` borrows it too, so its embedding and LM head are 151,936 rows
instead of Llama 3's 128,256 (every other shape is Llama-3.2-3B's; noted in
BENCHMARKS.md). Needs the `gguf` and `numpy` packages.
"""

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

# name: (arch, layers, hidden, heads, kv heads, ffn, rope base, qkv bias, tied head)
SHAPES = {
    "qwen2.5-1.5b": ("qwen2", 28, 1536, 12, 2, 8960, 1e6, True, True),
    "llama-3.2-3b": ("llama", 28, 3072, 24, 8, 8192, 5e5, False, True),
}


def copy_tokenizer(reader, writer):
    """Every tokenizer.* key of the donor file, as stored."""
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_array(field.name, vals)
        elif vtype == GGUFValueType.STRING:
            writer.add_string(field.name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            writer.add_key_value(field.name, field.parts[field.data[0]].tolist()[0], vtype)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    return len(tokens.data)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: random_gguf.py {{{','.join(SHAPES)}}} TOKENIZER.gguf OUT.gguf")
    name, donor, out = sys.argv[1:]
    arch, layers, d, heads, kv_heads, ffn, rope_base, bias, _tied = SHAPES[name]
    head_dim = d // heads
    rng = np.random.default_rng(0)

    writer = GGUFWriter(out, arch)
    writer.add_name(f"random-{name}")
    writer.add_context_length(32768)
    writer.add_embedding_length(d)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(rope_base)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(1)  # mostly F16
    vocab = copy_tokenizer(GGUFReader(donor), writer)

    def weight(tname, rows, cols, std=None):
        # Scaled so activations stay bounded through the layers (no NaN in a random net).
        std = std if std is not None else 1.0 / np.sqrt(cols)
        w = rng.standard_normal((rows, cols), dtype=np.float32) * std
        writer.add_tensor(tname, w.astype(np.float16))

    def ones(tname, n):
        writer.add_tensor(tname, np.ones(n, dtype=np.float32))

    weight("token_embd.weight", vocab, d, std=0.02)
    ones("output_norm.weight", d)
    for i in range(layers):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", d)
        weight(p + "attn_q.weight", heads * head_dim, d)
        weight(p + "attn_k.weight", kv_heads * head_dim, d)
        weight(p + "attn_v.weight", kv_heads * head_dim, d)
        if bias:
            for t, n in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
                writer.add_tensor(p + f"attn_{t}.bias", np.zeros(n * head_dim, np.float32))
        weight(p + "attn_output.weight", d, heads * head_dim)
        ones(p + "ffn_norm.weight", d)
        weight(p + "ffn_gate.weight", ffn, d)
        weight(p + "ffn_up.weight", ffn, d)
        weight(p + "ffn_down.weight", d, ffn)
        print(f"layer {i + 1}/{layers}", file=sys.stderr, end="\r")

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"\nwrote {out}: {name} shapes, vocab {vocab}", file=sys.stderr)


if __name__ == "__main__":
    main()
