#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Write small Llama-family checkpoints in the MLX layouts (4-bit, and with
the transformers engine 8-bit, unquantized and mixed precision, and the
mistral, qwen2 and qwen3 families) together with reference outputs from an
independent float64 forward pass.

The shared fixtures (tests/data/llama3-micro, llama3-tiny) cover one
configuration: tied embeddings, llama3 rope scaling, F16 scales, group size
64 and a 4:1 grouped-query ratio. This script writes variants that cover
the rest of what the loader and the CPU path support (see FIXTURES below and
tests/data/README.md): an untied quantized lm_head, plain rope, BF16
scales/biases/norms, group sizes 32 and 128, one kv head per query head, a
config without head_dim, a scalar eos_token_id and a max_position_embeddings
below the default context.

Weights are random but deterministic: every tensor comes from its own
random.Random seeded with "<fixture seed>:<tensor name>" (string seeds are
hashed with SHA-512, so the bytes do not depend on the Python build or on
PYTHONHASHSEED). Packed nibbles are uniform; a group's scale is spread
around target / 4.61 (the standard deviation of a uniform nibble) with one
in eight negative, and its bias is about -7.5 scale, so dequantized weights
are roughly zero-mean with standard deviation `target` (1/sqrt(in) for
decoder linears, 0.05 for embeddings and the LM head); norm weights lie in
[0.9, 1.1]. The safetensors file is written as MLX writes it: sorted,
unpadded JSON header with {"format": "mlx"} metadata, data in an order that
is not the key order, so tensors are unaligned.

The reference then reads the files back (its own reader, nothing shared with
the writer beyond the format), dequantizes every weight exactly
(scale * q + bias in float64 from the stored half-precision values) and runs
the forward pass of the fixtures' README in float64 with exactly rounded
dot products (math.fsum): rmsnorm with eps inside the square root, rope in
the split-halves convention with llama3 frequency scaling when the config
has it, causal attention with scale 1/sqrt(head_dim) where query head h
reads kv head h // (heads // kv_heads), SiLU MLP, final rmsnorm and the LM
head. expected.safetensors has the shared fixtures' format: prompt_ids I32
[T], logits F32 [T, vocab] (every prompt position), greedy_ids I32 [N] (argmax,
lowest id on ties) and greedy_logits F32 [N, vocab] (the rows that chose
them; row 0 is the last prompt row).

Every fixture is checked before it is written: the top-2 margin of every
greedy row is at least MIN_MARGIN (so float32 rounding cannot flip a greedy
id), and where a fixture tests plain rope, applying llama3 scaling instead
would change the prompt logits by at least MIN_SENSITIVITY (so the fixture
can tell the two apart at the 1e-4 CPU tolerance).

With --engine mlx the expected outputs come from MLX's own forward pass
instead (mlx-lm loads the checkpoint unchanged, scripts/mlx_baseline.py's
loader): the model cast to float32 (the packed words stay; every F16 or
BF16 scale, bias and norm converts exactly), the prompt in one pass with a
KV cache (logits of every position), then one pass per greedy id, the
rows read back as float32, argmax with the lowest id on ties. The fixture
directory then also holds reference.txt: the MLX and mlx-lm versions, the
dtype and the command. --dtype native keeps the checkpoint's dtype (what
mlx-lm runs: float16 activations for F16 scales), which only a half-precision
tolerance accepts (about 2e-2 relative error).

usage:
  make_reference_fixture.py [--engine python|mlx|transformers] OUT_DIR [NAME...]
      writes OUT_DIR/NAME/model/{config.json, model.safetensors,
      model.safetensors.index.json} and OUT_DIR/NAME/expected.safetensors
      for the named fixtures (default: every fixture of the engine: the
      python engine's llama3-micro-untied-g32 and llama3-micro-mha-g128,
      the mlx engine's llama3-micro-mlx, the transformers engine's
      llama3-micro-q8-g32, llama3-micro-bf16, llama3-micro-f32,
      llama3-micro-mixed, mistral-micro, qwen2-micro and qwen3-micro);
      refuses to overwrite.
  make_reference_fixture.py --engine mlx --model DIR --out FILE
      [--seed S] [--prompt-tokens T] [--greedy-tokens N] [--dtype D]
      writes FILE (expected.safetensors) for any checkpoint DIR from MLX:
      T prompt ids (32) by infer-bench's prompt rule from S (0), N greedy
      ids (8), dtype float32 (or native, float16, bfloat16); prints the
      smallest top-2 margin of the greedy rows; refuses to overwrite.
  make_reference_fixture.py [--engine python|mlx|transformers] --check FIXTURE_DIR
      recomputes FIXTURE_DIR/expected.safetensors (for example the shared
      transformers reference of tests/data/llama3-micro, or an MLX-made
      one) from FIXTURE_DIR/model with the engine (python: the float64
      reference, mlx: MLX in float32) and prints the relative errors and
      greedy agreement; exit 1 when the logits differ by more than 1e-5
      or an id disagrees.

The python engine is standard library only; about a minute for both its
fixtures. The transformers engine (the family's transformers class,
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM,
in float64 with eager attention on this script's dequantized weights, every
parameter loaded, the python engine's result printed beside it; the python
engine adds qwen2's q, k and v biases and normalizes qwen3's q and k per
head) needs torch (the CPU wheel) and
transformers. The mlx engine needs mlx and mlx-lm (pip install mlx mlx-lm; on
Linux without a GPU the CPU wheel, mlx[cpu]). The committed fixtures are
this script's output: tests never run it to make them.
"""

import json
import math
import operator
import os
import platform
import random
import shlex
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import TRANSFORMERS_CLASSES, module_bits, prompt_ids  # noqa: E402

NIBBLE_STD = math.sqrt((16 * 16 - 1) / 12.0)
BYTE_STD = math.sqrt((256 * 256 - 1) / 12.0)
EMBED_STD = 0.05
MIN_MARGIN = 1e-3
MIN_SENSITIVITY = 1e-3
# transformers keeps rmsnorm and the rope tables in float32 even when the
# model runs in float64, so its outputs agree with this reference to about
# 1e-6 (2.3e-7 on llama3-micro, 1.3e-6 on the greedy rows of llama3-tiny).
CHECK_TOLERANCE = 1e-5

# The micro fixture's attention shapes (2 layers, hidden 256, 8 heads of 32)
# with a smaller vocabulary and MLP so each fixture stays near 0.5 MB.
BASE_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "bos_token_id": 1,
    "eos_token_id": [2, 3],
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "model_type": "llama",
    "torch_dtype": "bfloat16",
}

# What each family changes in BASE_CONFIG (model_type and architectures,
# its own fields), as the real checkpoints' configs have them.
FAMILY_CONFIG = {
    "llama": {},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                "rope_theta": 1000000.0, "rope_scaling": None, "sliding_window": None,
                "attention_bias": None, "mlp_bias": None},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
              "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-06,
              "use_sliding_window": False, "sliding_window": 32768,
              "max_window_layers": 2, "attention_bias": None, "mlp_bias": None},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
              "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-06,
              "use_sliding_window": False, "sliding_window": None,
              "max_window_layers": 2, "attention_bias": False, "mlp_bias": None},
}

FIXTURES = {
    # untied lm_head, plain rope, BF16, group size 32, 4:1 grouped queries
    "llama3-micro-untied-g32": {
        "seed": 32,
        "group_size": 32,
        "dtype": "BF16",
        "config": {"tie_word_embeddings": False, "rope_scaling": None},
        "remove": [],
        "prompt_tokens": 32,
        "greedy_tokens": 8,
    },
    # one kv head per query head, group size 128, F16, llama3 rope, tied;
    # head_dim derived from hidden / heads, a scalar eos id, and a
    # max_position_embeddings below the default context of 1024
    "llama3-micro-mha-g128": {
        "seed": 128,
        "group_size": 128,
        "dtype": "F16",
        "config": {
            "num_key_value_heads": 8,
            "eos_token_id": 3,
            "max_position_embeddings": 512,
            "torch_dtype": "float16",
        },
        "remove": ["head_dim"],
        "prompt_tokens": 16,
        "greedy_tokens": 8,
    },
    # 8 bits (a byte per value), groups of 32, BF16 scales, untied (an
    # 8-bit lm_head); expected.safetensors from transformers
    "llama3-micro-q8-g32": {
        "seed": 8,
        "bits": 8,
        "group_size": 32,
        "dtype": "BF16",
        "config": {"tie_word_embeddings": False, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 128, "vocab_size": 256},
        "remove": [],
        "prompt_tokens": 24,
        "greedy_tokens": 8,
        "engine": "transformers",
    },
    # unquantized (no quantization block), BF16 weights, tied, 3 query heads
    # per kv head
    "llama3-micro-bf16": {
        "seed": 16,
        "bits": 0,
        "dtype": "BF16",
        "config": {"hidden_size": 96, "num_attention_heads": 3,
                   "num_key_value_heads": 1, "vocab_size": 256},
        "remove": [],
        "prompt_tokens": 24,
        "greedy_tokens": 8,
        "engine": "transformers",
    },
    # unquantized F32 weights and norms, untied, plain rope
    "llama3-micro-f32": {
        "seed": 320,
        "bits": 0,
        "dtype": "F32",
        "config": {"tie_word_embeddings": False, "rope_scaling": None,
                   "torch_dtype": "float32", "hidden_size": 64,
                   "num_attention_heads": 2, "num_key_value_heads": 1,
                   "intermediate_size": 64, "vocab_size": 256},
        "remove": [],
        "prompt_tokens": 16,
        "greedy_tokens": 8,
        "engine": "transformers",
    },
    # mixed precision as mlx-lm writes it: 4-bit groups of 64 by default,
    # per-module entries for an 8-bit v_proj and down_proj in layer 1 and an
    # 8-bit lm_head, and layer 1's o_proj left unquantized (no entry, no
    # scales: a quantization predicate that returned False); F16
    "llama3-micro-mixed": {
        "seed": 46,
        "group_size": 64,
        "dtype": "F16",
        "modules": {"model.layers.1.self_attn.v_proj": 8,
                    "model.layers.1.mlp.down_proj": 8,
                    "lm_head": 8,
                    "model.layers.1.self_attn.o_proj": 0},
        "config": {"tie_word_embeddings": False, "torch_dtype": "float16",
                   "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 128, "vocab_size": 256},
        "remove": [],
        "prompt_tokens": 24,
        "greedy_tokens": 8,
        "engine": "transformers",
    },
    # mistral (no sliding window) as Mistral Nemo has it: head_dim 64 is not
    # hidden / heads (32), untied, plain rope with theta 1e6, BF16, 2 query
    # heads per kv head
    "mistral-micro": {
        "family": "mistral",
        "seed": 70,
        "group_size": 64,
        "dtype": "BF16",
        "config": {"tie_word_embeddings": False, "hidden_size": 128,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                   "intermediate_size": 128, "vocab_size": 256,
                   "max_position_embeddings": 32768, "eos_token_id": 2},
        "remove": [],
        "prompt_tokens": 24,
        "greedy_tokens": 8,
        "engine": "transformers",
    },
    # qwen2: biases on q, k and v (BF16, as MLX stores them beside the
    # quantized weights), 7 query heads over 1 kv head (Qwen2.5's group of
    # 7), tied, plain rope with theta 1e6, groups of 32
    "qwen2-micro": {
        "family": "qwen2",
        "seed": 72,
        "group_size": 32,
        "dtype": "BF16",
        "config": {"hidden_size": 224, "num_attention_heads": 7,
                   "num_key_value_heads": 1, "head_dim": 32,
                   "intermediate_size": 128, "vocab_size": 256,
                   "max_position_embeddings": 32768, "eos_token_id": 2},
        "remove": [],
        "prompt_tokens": 24,
        "greedy_tokens": 8,
        "engine": "transformers",
    },
    # qwen3: q and k normalized per head (self_attn.q_norm, k_norm of
    # head_dim) before the rope, no biases; head_dim 64 over 4 heads makes q
    # twice as wide as hidden (as Qwen3 0.6B's 16 x 128 over 1024), tied
    "qwen3-micro": {
        "family": "qwen3",
        "seed": 76,
        "group_size": 64,
        "dtype": "BF16",
        "config": {"hidden_size": 128, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 64,
                   "intermediate_size": 128, "vocab_size": 256,
                   "max_position_embeddings": 40960, "eos_token_id": 2},
        "remove": [],
        "prompt_tokens": 24,
        "greedy_tokens": 8,
        "engine": "transformers",
    },
    # expected.safetensors from MLX (--engine mlx): the configuration of
    # the mlx-community Llama 3.2 checkpoints (tied, llama3 rope, F16, group
    # 64, 4:1 grouped queries) on the small shapes
    "llama3-micro-mlx": {
        "seed": 35,
        "group_size": 64,
        "dtype": "F16",
        "config": {"torch_dtype": "float16"},
        "remove": [],
        "prompt_tokens": 24,
        "greedy_tokens": 8,
        "engine": "mlx",
    },
}

ENGINES = ("python", "mlx", "transformers")
MLX_DTYPES = ("float32", "native", "float16", "bfloat16")

LINEARS = [  # (name, out, in) in units of the config
    ("self_attn.q_proj", "q", "hidden"),
    ("self_attn.k_proj", "kv", "hidden"),
    ("self_attn.v_proj", "kv", "hidden"),
    ("self_attn.o_proj", "hidden", "q"),
    ("mlp.gate_proj", "ffn", "hidden"),
    ("mlp.up_proj", "ffn", "hidden"),
    ("mlp.down_proj", "hidden", "ffn"),
]

# ---- half-precision encodings ---------------------------------------------


def encode_halves(dtype, values):
    """F16 (IEEE, round to nearest even), BF16 (float32 rounded to nearest
    even) or F32 little-endian bytes."""
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    words = struct.unpack("<%dI" % len(values), struct.pack("<%df" % len(values), *values))
    halves = [((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF for w in words]
    return struct.pack("<%dH" % len(halves), *halves)


def decode_halves(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    n = len(raw) // 2
    if dtype == "F16":
        return list(struct.unpack("<%de" % n, raw))
    if dtype == "BF16":
        words = [h << 16 for h in struct.unpack("<%dH" % n, raw)]
        return list(struct.unpack("<%df" % n, struct.pack("<%dI" % n, *words)))
    raise ValueError("expected F32, F16 or BF16, got %s" % dtype)


# ---- safetensors ------------------------------------------------------------


def write_safetensors(path, tensors, metadata, order):
    """tensors: name -> (dtype, shape, bytes); data written in `order`."""
    header = {"__metadata__": metadata}
    offset = 0
    for name in order:
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "xb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            f.write(tensors[name][2])


def read_safetensors(path):
    """name -> (dtype, shape, bytes), every range checked against the file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("%s: header longer than the file" % path)
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if not 0 <= begin <= end <= len(data) - base:
            raise ValueError("%s: tensor %s outside the file" % (path, name))
        out[name] = (entry["dtype"], entry["shape"], data[base + begin:base + end])
    return out


# ---- the checkpoint ---------------------------------------------------------


def dims(config):
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return {
        "hidden": config["hidden_size"],
        "ffn": config["intermediate_size"],
        "q": heads * head_dim,
        "kv": config["num_key_value_heads"] * head_dim,
        "vocab": config["vocab_size"],
        "head_dim": head_dim,
    }


def make_config(spec):
    config = dict(BASE_CONFIG)
    for key, value in FAMILY_CONFIG[spec.get("family", "llama")].items():
        if value is None and key in ("attention_bias", "mlp_bias"):
            del config[key]  # fields the family's configs do not have
        else:
            config[key] = value
    config.update(spec["config"])
    for key in spec["remove"]:
        del config[key]
    if spec.get("bits", 4) == 0:
        return config
    quant = {"group_size": spec["group_size"], "bits": spec.get("bits", 4)}
    for module, bits in sorted(spec.get("modules", {}).items()):
        if bits:
            quant[module] = {"group_size": spec["group_size"], "bits": bits}
    config["quantization"] = quant
    config["quantization_config"] = json.loads(json.dumps(quant))
    return config


def tensor_rng(seed, name):
    return random.Random("%d:%s" % (seed, name))


def scale_value(rng, target):
    s = target / NIBBLE_STD * (0.5 + rng.random())
    return -s if rng.random() < 0.125 else s


def spec_bits(spec, prefix):
    """A module's bits in a fixture spec: 0 unquantized."""
    return spec.get("modules", {}).get(prefix, spec.get("bits", 4))


def make_linear(tensors, seed, prefix, out, inp, target, spec):
    bits = spec_bits(spec, prefix)
    if bits == 0:
        make_dense(tensors, seed, prefix, out, inp, target, spec)
        return
    if bits == 8:
        make_linear_q8(tensors, seed, prefix, out, inp, target, spec)
        return
    group = spec["group_size"]
    rng = tensor_rng(seed, prefix)
    words = out * inp // 8
    packed = rng.getrandbits(32 * words).to_bytes(4 * words, "little")
    scales, biases = [], []
    for _ in range(out * inp // group):
        s = scale_value(rng, target)
        scales.append(s)
        biases.append(s * (-7.5 + 0.5 * (rng.random() - 0.5)))
    dtype = spec["dtype"]
    shape = [out, inp // group]
    tensors[prefix + ".weight"] = ("U32", [out, inp // 8], packed)
    tensors[prefix + ".scales"] = (dtype, shape, encode_halves(dtype, scales))
    tensors[prefix + ".biases"] = (dtype, shape, encode_halves(dtype, biases))


def make_linear_q8(tensors, seed, prefix, out, inp, target, spec):
    """8-bit: a byte per value (4 a word, low first), scales around
    target / BYTE_STD, biases about -127.5 scale."""
    group = spec["group_size"]
    rng = tensor_rng(seed, prefix)
    packed = rng.getrandbits(8 * out * inp).to_bytes(out * inp, "little")
    scales, biases = [], []
    for _ in range(out * inp // group):
        s = target / BYTE_STD * (0.5 + rng.random())
        s = -s if rng.random() < 0.125 else s
        scales.append(s)
        biases.append(s * (-127.5 + 0.5 * (rng.random() - 0.5)))
    dtype = spec["dtype"]
    shape = [out, inp // group]
    tensors[prefix + ".weight"] = ("U32", [out, inp // 4], packed)
    tensors[prefix + ".scales"] = (dtype, shape, encode_halves(dtype, scales))
    tensors[prefix + ".biases"] = (dtype, shape, encode_halves(dtype, biases))


def make_dense(tensors, seed, prefix, out, inp, target, spec):
    """Unquantized: uniform values of standard deviation target."""
    rng = tensor_rng(seed, prefix)
    half = math.sqrt(3.0) * target
    values = [(2.0 * rng.random() - 1.0) * half for _ in range(out * inp)]
    tensors[prefix + ".weight"] = (spec["dtype"], [out, inp],
                                   encode_halves(spec["dtype"], values))


def make_norm(tensors, seed, name, n, spec):
    rng = tensor_rng(seed, name)
    values = [0.9 + 0.2 * rng.random() for _ in range(n)]
    tensors[name] = (spec["dtype"], [n], encode_halves(spec["dtype"], values))


def make_bias(tensors, seed, name, n, spec):
    """A linear's bias (qwen2's q, k and v): uniform in [-0.5, 0.5], about
    the size of the projections' outputs."""
    rng = tensor_rng(seed, name)
    values = [rng.random() - 0.5 for _ in range(n)]
    tensors[name] = (spec["dtype"], [n], encode_halves(spec["dtype"], values))


QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")


def qkv_bias(config):
    """qwen2 has biases on q, k and v (transformers' Qwen2Attention always)."""
    return config.get("model_type") == "qwen2"


def qk_norm(config):
    """qwen3 normalizes q and k per head (q_norm, k_norm)."""
    return config.get("model_type") == "qwen3"


def make_tensors(spec, config):
    seed = spec["seed"]
    d = dims(config)
    tensors = {}
    make_linear(tensors, seed, "model.embed_tokens", d["vocab"], d["hidden"], EMBED_STD, spec)
    for layer in range(config["num_hidden_layers"]):
        prefix = "model.layers.%d." % layer
        make_norm(tensors, seed, prefix + "input_layernorm.weight", d["hidden"], spec)
        for name, out, inp in LINEARS:
            make_linear(tensors, seed, prefix + name, d[out], d[inp],
                        1.0 / math.sqrt(d[inp]), spec)
            if qkv_bias(config) and name in QKV:
                make_bias(tensors, seed, prefix + name + ".bias", d[out], spec)
        if qk_norm(config):
            make_norm(tensors, seed, prefix + "self_attn.q_norm.weight", d["head_dim"], spec)
            make_norm(tensors, seed, prefix + "self_attn.k_norm.weight", d["head_dim"], spec)
        make_norm(tensors, seed, prefix + "post_attention_layernorm.weight", d["hidden"], spec)
    make_norm(tensors, seed, "model.norm.weight", d["hidden"], spec)
    if not config["tie_word_embeddings"]:
        make_linear(tensors, seed, "lm_head", d["vocab"], d["hidden"], EMBED_STD, spec)
    return tensors


def write_checkpoint(model_dir, spec, config):
    os.makedirs(model_dir)
    tensors = make_tensors(spec, config)
    order = sorted(tensors)
    random.Random("%d:order" % spec["seed"]).shuffle(order)
    write_safetensors(os.path.join(model_dir, "model.safetensors"), tensors,
                      {"format": "mlx"}, order)
    total = sum(len(raw) for _, _, raw in tensors.values())
    index = {"metadata": {"total_size": total},
             "weight_map": {name: "model.safetensors" for name in tensors}}
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "x") as f:
        json.dump(index, f, indent=4, sort_keys=True)
        f.write("\n")
    with open(os.path.join(model_dir, "config.json"), "x") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


# ---- the float64 reference ----------------------------------------------------


def dequantize(config, tensors, prefix):
    """Rows of scale * q + bias, q the 4-bit or 8-bit values of a word low
    first; an unquantized weight's rows as stored."""
    bits = module_bits(config, tensors, prefix)
    dtype, (rows, words), packed = tensors[prefix + ".weight"]
    if bits == 0:
        flat = decode_halves(dtype, packed)
        return [flat[r * words:(r + 1) * words] for r in range(rows)]
    sdtype, (_, groups), sraw = tensors[prefix + ".scales"]
    scales = decode_halves(sdtype, sraw)
    biases = decode_halves(tensors[prefix + ".biases"][0], tensors[prefix + ".biases"][2])
    per_word = 32 // bits
    mask = (1 << bits) - 1
    width = words * per_word
    group = width // groups
    ints = struct.unpack("<%dI" % (rows * words), packed)
    out = []
    for r in range(rows):
        row = []
        for w in range(words):
            word = ints[r * words + w]
            for k in range(per_word):
                g = r * groups + (w * per_word + k) // group
                row.append(scales[g] * ((word >> (bits * k)) & mask) + biases[g])
        out.append(row)
    return out


def matvec(rows, x):
    return [math.fsum(map(operator.mul, row, x)) for row in rows]


def rmsnorm(x, weight, eps):
    inv = 1.0 / math.sqrt(math.fsum(v * v for v in x) / len(x) + eps)
    return [v * inv * w for v, w in zip(x, weight)]


def inverse_frequencies(config, head_dim):
    """theta^(-2j/head_dim), with transformers' llama3 rescaling when the
    config has rope_scaling of type llama3."""
    theta = config["rope_theta"]
    inv = [1.0 / theta ** (2.0 * j / head_dim) for j in range(head_dim // 2)]
    scaling = config.get("rope_scaling")
    if not scaling or scaling.get("rope_type", scaling.get("type")) != "llama3":
        return inv
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    out = []
    for f in inv:
        wavelen = 2.0 * math.pi / f
        if wavelen < old / high:
            out.append(f)
        elif wavelen > old / low:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1.0 - smooth) * f / factor + smooth * f)
    return out


class Reference:
    """A float64 Llama forward pass with a KV cache over a checkpoint."""

    def __init__(self, model_dir, config_override=None):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = c = json.load(f)
        if config_override:
            c.update(config_override)
        tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        self.eps = c["rms_norm_eps"]
        self.inv_freq = inverse_frequencies(c, self.head_dim)
        self.embed = dequantize(c, tensors, "model.embed_tokens")
        tied = c.get("tie_word_embeddings", False)
        self.head = self.embed if tied else dequantize(c, tensors, "lm_head")

        def norm(name):
            dtype, _, raw = tensors[name]
            return decode_halves(dtype, raw)

        self.layers = []
        for layer in range(c["num_hidden_layers"]):
            prefix = "model.layers.%d." % layer
            weights = {name: dequantize(c, tensors, prefix + name) for name, _, _ in LINEARS}
            for name in QKV:
                weights[name + ".bias"] = (norm(prefix + name + ".bias") if qkv_bias(c)
                                           else None)
            weights["q_norm"] = norm(prefix + "self_attn.q_norm.weight") if qk_norm(c) else None
            weights["k_norm"] = norm(prefix + "self_attn.k_norm.weight") if qk_norm(c) else None
            weights["input_norm"] = norm(prefix + "input_layernorm.weight")
            weights["post_norm"] = norm(prefix + "post_attention_layernorm.weight")
            self.layers.append(weights)
        self.final_norm = norm("model.norm.weight")
        self.reset()

    def reset(self):
        self.keys = [[] for _ in self.layers]
        self.values = [[] for _ in self.layers]

    def head_norm(self, vec, heads, weight):
        """RMSNorm of each head's head_dim values (qwen3's q_norm, k_norm)."""
        d = self.head_dim
        out = []
        for h in range(heads):
            out.extend(rmsnorm(vec[h * d:(h + 1) * d], weight, self.eps))
        return out

    def rope(self, vec, heads, pos):
        d, half = self.head_dim, self.head_dim // 2
        for h in range(heads):
            base = h * d
            for j in range(half):
                angle = pos * self.inv_freq[j]
                c, s = math.cos(angle), math.sin(angle)
                x0, x1 = vec[base + j], vec[base + j + half]
                vec[base + j] = x0 * c - x1 * s
                vec[base + j + half] = x1 * c + x0 * s

    def step(self, token):
        """Appends one token at the next position; returns its logits."""
        d = self.head_dim
        per_kv = self.heads // self.kv_heads
        h = list(self.embed[token])
        for layer, w in enumerate(self.layers):
            pos = len(self.keys[layer])
            x = rmsnorm(h, w["input_norm"], self.eps)
            q = matvec(w["self_attn.q_proj"], x)
            k = matvec(w["self_attn.k_proj"], x)
            v = matvec(w["self_attn.v_proj"], x)
            if w["self_attn.q_proj.bias"] is not None:
                q = [a + b for a, b in zip(q, w["self_attn.q_proj.bias"])]
                k = [a + b for a, b in zip(k, w["self_attn.k_proj.bias"])]
                v = [a + b for a, b in zip(v, w["self_attn.v_proj.bias"])]
            if w["q_norm"] is not None:
                q = self.head_norm(q, self.heads, w["q_norm"])
                k = self.head_norm(k, self.kv_heads, w["k_norm"])
            self.rope(q, self.heads, pos)
            self.rope(k, self.kv_heads, pos)
            self.keys[layer].append(k)
            self.values[layer].append(v)
            attn = []
            for head in range(self.heads):
                kv = head // per_kv
                qh = q[head * d:(head + 1) * d]
                scores = [math.fsum(map(operator.mul, qh, key[kv * d:(kv + 1) * d]))
                          / math.sqrt(d) for key in self.keys[layer]]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = math.fsum(weights)
                for j in range(d):
                    attn.append(math.fsum(wt * val[kv * d + j] for wt, val
                                          in zip(weights, self.values[layer])) / total)
            h = [a + b for a, b in zip(h, matvec(w["self_attn.o_proj"], attn))]
            x = rmsnorm(h, w["post_norm"], self.eps)
            gate = matvec(w["mlp.gate_proj"], x)
            up = matvec(w["mlp.up_proj"], x)
            act = [g / (1.0 + math.exp(-g)) * u for g, u in zip(gate, up)]
            h = [a + b for a, b in zip(h, matvec(w["mlp.down_proj"], act))]
        return matvec(self.head, rmsnorm(h, self.final_norm, self.eps))

    def run(self, prompt, greedy=None, count=0):
        """Prompt logits, then `count` greedy ids with the rows that chose
        them; with `greedy` given, those ids are fed instead (teacher
        forcing) and count = len(greedy)."""
        self.reset()
        logits = [self.step(t) for t in prompt]
        ids, rows = [], []
        row = logits[-1]
        count = len(greedy) if greedy is not None else count
        for i in range(count):
            ids.append(argmax(row))
            rows.append(row)
            if i + 1 < count:
                row = self.step(greedy[i] if greedy is not None else ids[-1])
        return logits, ids, rows


def argmax(row):
    best = 0
    for i, v in enumerate(row):
        if v > row[best]:
            best = i
    return best


def top2_margin(row):
    first, second = sorted(row, reverse=True)[:2]
    return first - second


def relative_error(ours, ref):
    num = math.fsum((a - b) ** 2 for ra, rb in zip(ours, ref) for a, b in zip(ra, rb))
    den = math.fsum(b * b for rb in ref for b in rb)
    return math.sqrt(num) / math.sqrt(den)


# ---- the MLX engine ------------------------------------------------------------


class MLXReference:
    """MLX's forward pass over a checkpoint (mlx-lm's model, cast to dtype
    unless "native"), with the interface of Reference.run."""

    def __init__(self, model_dir, dtype="float32"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import mlx_baseline

        self.mx, self.model, self.config, self.dtype = mlx_baseline.load(model_dir, dtype)
        import mlx_lm

        self.versions = {"mlx": self.mx.__version__,
                         "mlx_lm": getattr(mlx_lm, "__version__", "unknown")}

    def _rows(self, ids, cache):
        mx = self.mx
        logits = self.model(mx.array([ids], dtype=mx.int32), cache=cache)
        return logits[0].astype(mx.float32).tolist()

    def run(self, prompt, greedy=None, count=0):
        from mlx_lm.models.cache import make_prompt_cache

        cache = make_prompt_cache(self.model)
        logits = self._rows(prompt, cache)
        ids, rows = [], []
        row = logits[-1]
        count = len(greedy) if greedy is not None else count
        for i in range(count):
            ids.append(argmax(row))
            rows.append(row)
            if i + 1 < count:
                row = self._rows([greedy[i] if greedy is not None else ids[-1]], cache)[0]
        return logits, ids, rows

    def description(self):
        return ("MLX %s, mlx-lm %s: mlx_lm.utils.load_model, %s, KV cache from "
                "make_prompt_cache, teacher-forced greedy rows"
                % (self.versions["mlx"], self.versions["mlx_lm"],
                   "cast to float32 (set_dtype)" if self.dtype == "float32" else
                   "activations in %s" % self.dtype))


# ---- the transformers engine ----------------------------------------------------


class TransformersReference:
    """transformers' LlamaForCausalLM (eager attention) in float64 on the
    weights this script's reader dequantizes, with the interface of
    Reference.run: the whole sequence again for every greedy row."""

    def __init__(self, model_dir):
        import torch
        import transformers

        weights = Reference(model_dir)
        c = {k: v for k, v in weights.config.items()
             if k not in ("quantization", "quantization_config")}
        c["torch_dtype"] = "float64"
        family = TRANSFORMERS_CLASSES[c.get("model_type", "llama")]
        config = getattr(transformers, family + "Config")(**c)
        model = getattr(transformers, family + "ForCausalLM")(config)
        self.family = family
        model.config._attn_implementation = "eager"
        state = {"model.embed_tokens.weight": weights.embed,
                 "model.norm.weight": weights.final_norm}
        if not c.get("tie_word_embeddings", False):
            state["lm_head.weight"] = weights.head
        for layer, w in enumerate(weights.layers):
            prefix = "model.layers.%d." % layer
            for name, _, _ in LINEARS:
                state[prefix + name + ".weight"] = w[name]
                if w.get(name + ".bias") is not None:
                    state[prefix + name + ".bias"] = w[name + ".bias"]
            if w["q_norm"] is not None:
                state[prefix + "self_attn.q_norm.weight"] = w["q_norm"]
                state[prefix + "self_attn.k_norm.weight"] = w["k_norm"]
            state[prefix + "input_layernorm.weight"] = w["input_norm"]
            state[prefix + "post_attention_layernorm.weight"] = w["post_norm"]
        model = model.to(torch.float64)
        result = model.load_state_dict({k: torch.tensor(v, dtype=torch.float64)
                                        for k, v in state.items()}, strict=False)
        missing = [k for k in result.missing_keys if k != "lm_head.weight"]
        if missing or result.unexpected_keys:
            raise SystemExit("error: the transformers model's parameters differ from "
                             "the checkpoint's: missing %s, unexpected %s"
                             % (missing, result.unexpected_keys))
        model.tie_weights()
        model.eval()
        self.torch, self.model = torch, model
        self.versions = {"torch": torch.__version__,
                         "transformers": transformers.__version__}

    def _rows(self, ids):
        with self.torch.no_grad():
            out = self.model(self.torch.tensor([ids], dtype=self.torch.long))
        return out.logits[0].tolist()

    def run(self, prompt, greedy=None, count=0):
        logits = self._rows(prompt)
        ids, rows, seq = [], [], list(prompt)
        row = logits[-1]
        count = len(greedy) if greedy is not None else count
        for i in range(count):
            ids.append(argmax(row))
            rows.append(row)
            if i + 1 < count:
                seq.append(greedy[i] if greedy is not None else ids[-1])
                row = self._rows(seq)[-1]
        return logits, ids, rows

    def description(self):
        return ("transformers %s (torch %s): %sForCausalLM, eager attention, "
                "float64, on the dequantized weights"
                % (self.versions["transformers"], self.versions["torch"], self.family))


def reference_of(engine, model_dir, dtype="float32"):
    if engine == "transformers":
        try:
            return TransformersReference(model_dir)
        except ImportError as e:
            raise SystemExit("error: --engine transformers needs torch and "
                             "transformers: %s" % e)
    if engine == "mlx":
        try:
            return MLXReference(model_dir, dtype)
        except ImportError as e:
            raise SystemExit("error: --engine mlx needs mlx and mlx-lm (pip install mlx "
                             "mlx-lm): %s" % e)
    return Reference(model_dir)


def write_reference_note(path, ref, command):
    """reference.txt beside an MLX-made expected.safetensors."""
    with open(path, "x") as f:
        f.write("expected.safetensors: %s\n" % ref.description())
        f.write("mlx %s\nmlx-lm %s\ndtype %s\ndevice %s (%s %s)\npython %s\n"
                % (ref.versions["mlx"], ref.versions["mlx_lm"], ref.dtype,
                   ref.mx.default_device(), platform.system(), platform.machine(),
                   sys.version.split()[0]))
        f.write("command: %s\n" % command)


# ---- expected.safetensors -----------------------------------------------------


def write_expected(path, prompt, logits, greedy, greedy_logits, metadata):
    def f32(rows):
        flat = [v for r in rows for v in r]
        return struct.pack("<%df" % len(flat), *flat)

    def i32(ids):
        return struct.pack("<%di" % len(ids), *ids)

    vocab = len(logits[0])
    tensors = {
        "prompt_ids": ("I32", [len(prompt)], i32(prompt)),
        "logits": ("F32", [len(logits), vocab], f32(logits)),
        "greedy_ids": ("I32", [len(greedy)], i32(greedy)),
        "greedy_logits": ("F32", [len(greedy_logits), vocab], f32(greedy_logits)),
    }
    write_safetensors(path, tensors, metadata,
                      ["prompt_ids", "logits", "greedy_ids", "greedy_logits"])


def read_expected(path):
    t = read_safetensors(path)

    def ints(name):
        raw = t[name][2]
        return list(struct.unpack("<%di" % (len(raw) // 4), raw))

    def rows(name):
        n, vocab = t[name][1]
        flat = struct.unpack("<%df" % (n * vocab), t[name][2])
        return [list(flat[i * vocab:(i + 1) * vocab]) for i in range(n)]

    return ints("prompt_ids"), rows("logits"), ints("greedy_ids"), rows("greedy_logits")


# ---- commands -------------------------------------------------------------------


def make_fixture(out_root, name, engine="python", command=None):
    spec = FIXTURES[name]
    config = make_config(spec)
    root = os.path.join(out_root, name)
    if os.path.exists(root):
        raise SystemExit("error: %s already exists; refusing to overwrite" % root)
    model_dir = os.path.join(root, "model")
    write_checkpoint(model_dir, spec, config)
    rng = random.Random("%d:prompt" % spec["seed"])
    prompt = [rng.randrange(config["vocab_size"]) for _ in range(spec["prompt_tokens"])]
    ref = reference_of(engine, model_dir)
    logits, greedy, greedy_logits = ref.run(prompt, count=spec["greedy_tokens"])
    margin = min(top2_margin(row) for row in greedy_logits)
    if margin < MIN_MARGIN:
        raise SystemExit("error: %s: a greedy top-2 margin is %.3g < %g; pick "
                         "another seed" % (name, margin, MIN_MARGIN))
    report = "%s: greedy %s, smallest top-2 margin %.3g" % (name, greedy, margin)
    if not config.get("rope_scaling"):
        scaled = Reference(model_dir, {"rope_scaling": BASE_CONFIG["rope_scaling"]})
        change = relative_error(scaled.run(prompt)[0], logits)
        if change < MIN_SENSITIVITY:
            raise SystemExit("error: %s: llama3 rope scaling changes the logits "
                             "by only %.3g" % (name, change))
        report += ", llama3 scaling would change the logits by %.3g" % change
    if engine in ("mlx", "transformers"):
        # the independent float64 reference on the same prompt and ids
        ours, ids, rows = Reference(model_dir).run(prompt, greedy=greedy)
        report += (", float64 reference: logits %.3g, greedy logits %.3g relative error, "
                   "greedy ids %s" % (relative_error(ours, logits),
                                      relative_error(rows, greedy_logits),
                                      "equal" if ids == greedy else "DIFFERENT %s" % ids))
    if engine == "mlx":
        description = "scripts/make_reference_fixture.py --engine mlx: " + ref.description()
        write_reference_note(os.path.join(root, "reference.txt"), ref, command)
    elif engine == "transformers":
        description = ("scripts/make_reference_fixture.py --engine transformers: "
                       + ref.description())
    else:
        description = ("scripts/make_reference_fixture.py: pure-Python float64 forward "
                       "pass on the dequantized weights")
    write_expected(os.path.join(root, "expected.safetensors"), prompt, logits,
                   greedy, greedy_logits, {"reference": description, "fixture": name})
    print(report)


def make_expected(model_dir, out, seed, prompt_tokens, greedy_tokens, dtype, command):
    """expected.safetensors for any checkpoint from MLX (--model, --out)."""
    if os.path.exists(out):
        raise SystemExit("error: %s already exists; refusing to overwrite" % out)
    ref = reference_of("mlx", model_dir, dtype)
    prompt = prompt_ids(ref.config, seed, prompt_tokens)
    logits, greedy, greedy_logits = ref.run(prompt, count=greedy_tokens)
    write_expected(out, prompt, logits, greedy, greedy_logits,
                   {"reference": "scripts/make_reference_fixture.py --engine mlx: "
                    + ref.description(), "model": model_dir, "seed": str(seed),
                    "command": command})
    print("%s: %d prompt ids (seed %d), greedy %s, smallest top-2 margin %.3g"
          % (out, len(prompt), seed, greedy,
             min(top2_margin(row) for row in greedy_logits)))
    return 0


def check_fixture(fixture_dir, engine="python"):
    prompt, logits, greedy, greedy_logits = read_expected(
        os.path.join(fixture_dir, "expected.safetensors"))
    ref = reference_of(engine, os.path.join(fixture_dir, "model"))
    ours, ids, rows = ref.run(prompt, greedy=greedy)
    agree = 0
    while agree < len(greedy) and ids[agree] == greedy[agree]:
        agree += 1
    e_logits = relative_error(ours, logits)
    e_greedy = relative_error(rows, greedy_logits)
    print("%s: %s engine: logits relative error %.3e, greedy logits %.3e, greedy "
          "agreement %d/%d" % (fixture_dir, engine, e_logits, e_greedy, agree, len(greedy)))
    ok = e_logits <= CHECK_TOLERANCE and e_greedy <= CHECK_TOLERANCE and agree == len(greedy)
    return 0 if ok else 1


def usage():
    print(__doc__.split("usage:")[1].split("The python engine")[0], file=sys.stderr)
    return 2


def main(argv):
    import argparse

    ap = argparse.ArgumentParser(prog="make_reference_fixture.py", add_help=False)
    ap.add_argument("--engine", choices=ENGINES, default="python")
    ap.add_argument("--check", metavar="FIXTURE_DIR")
    ap.add_argument("--model")
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--greedy-tokens", type=int, default=8)
    ap.add_argument("--dtype", choices=MLX_DTYPES, default="float32")
    ap.add_argument("rest", nargs="*")
    args, unknown = ap.parse_known_args(argv)
    if unknown or not argv:
        return usage()
    if args.dtype != "float32" and not args.model:
        print("error: --dtype applies to --model (fixtures are made in float32)",
              file=sys.stderr)
        return 2
    command = " ".join(shlex.quote(a) for a in ["scripts/make_reference_fixture.py"] + argv)
    if args.check:
        if args.rest or args.model or args.out:
            return usage()
        return check_fixture(args.check, args.engine)
    if args.model or args.out:
        if not (args.model and args.out) or args.rest or args.engine != "mlx":
            print("error: --model and --out go together, with --engine mlx", file=sys.stderr)
            return 2
        if args.seed < 0 or args.prompt_tokens < 1 or args.greedy_tokens < 1:
            print("error: --seed must be non-negative, --prompt-tokens and --greedy-tokens "
                  "positive", file=sys.stderr)
            return 2
        return make_expected(args.model, args.out, args.seed, args.prompt_tokens,
                             args.greedy_tokens, args.dtype, command)
    if not args.rest:
        return usage()
    names = args.rest[1:] or sorted(n for n, spec in FIXTURES.items()
                                    if spec.get("engine", "python") == args.engine)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        print("error: unknown fixture %s (known: %s)" % (", ".join(unknown),
              ", ".join(sorted(FIXTURES))), file=sys.stderr)
        return 2
    for name in names:
        make_fixture(args.rest[0], name, args.engine, command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
