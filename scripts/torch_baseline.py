#!/usr/bin/env python3
"""The Hugging Face transformers peer of `foundry infer-bench`.

Reads the same MLX 4-bit checkpoint, dequantizes every weight to bfloat16
(w = scale * q + bias per group, q the nibbles of each little-endian uint32,
low nibble first), builds a transformers LlamaForCausalLM from config.json
(tied embeddings and llama3 rope scaling as configured), and runs the
infer-bench protocol with a static KV cache: each execution resets the
cache, prefills the prompt in one forward pass (cache_position 0..P-1),
takes the argmax, then runs gen_tokens - 1 single-token passes feeding each
argmax back, EOS ignored. torch.cuda.synchronize() brackets every timed
section. warmup executions are discarded; the report has the schema of
foundry.infer.report version 1 (docs/infer-bench.md) with implementation
"transformers" and backend "transformers-bf16"; it is never overwritten.

The prompt is either taken from an infer-bench report (--prompt-from, the
same ids, lengths and seed) or made from --seed by the infer-bench rule
(foundry/infer_bench.h): SplitMix64 with initial state
stream_seed(seed, 2 << 32), each id next() % vocab_size, drawn again while
it is the BOS id or an EOS id.

usage:
  torch_baseline.py --model DIR --report PATH [--prompt-from REPORT]
      [--seed S] [--prompt-tokens N] [--gen-tokens N] [--warmup N]
      [--iterations N] [--compile]
"""
import argparse
import json
import os
import platform
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_summary  # noqa: E402  (SplitMix64 and the statistics)

PROMPT_STREAM = 2 << 32
RESAMPLES = 10000
CEILING_BYTES = 512 << 20


# ---- the prompt -------------------------------------------------------------


def special_ids(config):
    eos = config.get("eos_token_id")
    ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if config.get("bos_token_id") is not None:
        ids.add(config["bos_token_id"])
    return ids


def prompt_ids(config, seed, count):
    """The infer-bench prompt of `count` ids from seed."""
    g = bench_summary.SplitMix64(bench_summary.stream_seed(seed, PROMPT_STREAM))
    special = special_ids(config)
    vocab = config["vocab_size"]
    out = []
    while len(out) < count:
        i = g.next() % vocab
        if i not in special:
            out.append(i)
    return out


# ---- the checkpoint ---------------------------------------------------------


def read_header(path):
    """(data offset, {name: entry}) of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return 8 + n, header


def checkpoint_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    return ["model.safetensors"]


def dequantize(packed, scales, biases, group_size, shifts):
    """Rows of scale * q + bias: packed (out, in / 8) words as signed 64-bit
    integers holding the uint32 values, scales and biases (out, in / group)
    as floats, shifts = [0, 4, ..., 28] in the array library of packed
    (numpy or torch). Returns (out, in)."""
    q = (packed[..., None] >> shifts) & 15
    rows = packed.shape[0]
    q = q.reshape(rows, -1, group_size)
    w = q * scales[..., None] + biases[..., None]
    return w.reshape(rows, -1)


def load_state_dict(model_dir, config, device):
    """The checkpoint's tensors dequantized to bfloat16 on device, by the
    transformers names."""
    import torch

    dtypes = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
              "U32": torch.int32, "I32": torch.int32}
    group = config["quantization"]["group_size"]
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=device)
    state = {}
    for name in checkpoint_files(model_dir):
        path = os.path.join(model_dir, name)
        base, header = read_header(path)
        with open(path, "rb") as f:
            data = f.read()

        def tensor(key):
            e = header[key]
            begin, end = e["data_offsets"]
            dt = dtypes[e["dtype"]]
            count = (end - begin) // torch.empty(0, dtype=dt).element_size()
            # a copy of the bytes: aligned, writable
            raw = bytearray(data[base + begin:base + end])
            t = torch.frombuffer(raw, dtype=dt, count=count)
            return t.reshape(e["shape"]).to(device)

        for key in header:
            if key.endswith(".scales") or key.endswith(".biases"):
                continue
            prefix = key[: -len(".weight")] if key.endswith(".weight") else key
            if prefix + ".scales" in header:
                packed = tensor(key).to(torch.int64) & 0xFFFFFFFF
                w = dequantize(packed, tensor(prefix + ".scales").float(),
                               tensor(prefix + ".biases").float(), group, shifts)
                state[key] = w.to(torch.bfloat16)
            else:
                state[key] = tensor(key).to(torch.bfloat16)
        del data
    return state


def build_model(model_dir, device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    fields = {k: v for k, v in raw.items()
              if k not in ("quantization", "quantization_config")}
    fields["torch_dtype"] = "bfloat16"
    config = LlamaConfig(**fields)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    state = load_state_dict(model_dir, raw, device)
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if unexpected or set(missing) - allowed:
        raise SystemExit("error: checkpoint and model disagree: missing %s, "
                         "unexpected %s" % (missing, unexpected))
    if config.tie_word_embeddings:
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model.eval()
    return raw, config, model


# ---- the protocol -----------------------------------------------------------


def make_cache(model, length, device):
    import torch
    from transformers import StaticCache

    attempts = [
        dict(config=model.config, max_batch_size=1, max_cache_len=length,
             device=device, dtype=torch.bfloat16),
        dict(config=model.config, max_cache_len=length),
    ]
    last = None
    for kwargs in attempts:
        try:
            return StaticCache(**kwargs)
        except TypeError as e:  # the constructor changed across versions
            last = e
    raise last


def kv_cache_bytes(cache):
    import torch

    total = 0
    for obj in vars(cache).values():
        seq = obj if isinstance(obj, (list, tuple)) else [obj]
        for t in seq:
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    for layer in getattr(cache, "layers", []) or []:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def synchronize(device):
    import torch

    if device != "cpu":
        torch.cuda.synchronize()


def execution(model, cache, ids, gen_tokens, step):
    """One reset + prefill + decode: (total, prefill, decode seconds, ids)."""
    import torch

    device = ids.device
    synchronize(device.type)
    t0 = time.perf_counter()
    cache.reset()
    p = ids.shape[1]
    out = step(ids, torch.arange(p, device=device))
    nxt = out.argmax(-1).view(1, 1)
    synchronize(device.type)
    t1 = time.perf_counter()
    generated = [nxt]
    for i in range(gen_tokens - 1):
        out = step(nxt, torch.tensor([p + i], device=device))
        nxt = out.argmax(-1).view(1, 1)
        generated.append(nxt)
    synchronize(device.type)
    t2 = time.perf_counter()
    return t2 - t0, t1 - t0, t2 - t1, [int(x) for x in torch.cat(generated).view(-1)]


def d2d_ceiling(device):
    """Device-to-device copy bandwidth, bytes read + written per second
    (median of 10 after one warm copy), as fdy_cuda_measure_d2d counts."""
    import torch

    a = torch.empty(CEILING_BYTES, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    del a, b
    return 2.0 * CEILING_BYTES / bench_summary.median(times)


def decode_weight_bytes(model, config):
    """Weight bytes a decode token reads: every parameter once, the
    embedding table one row (plus the whole table again as the LM head when
    tied)."""
    emb = model.model.embed_tokens.weight
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    row = emb.shape[1] * emb.element_size()
    total -= emb.numel() * emb.element_size() - row
    if config.tie_word_embeddings:
        total += emb.numel() * emb.element_size()
    return total


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--prompt-from")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--device", default="cuda",
                    help="torch device (cpu only to test the script)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the forward pass (mode reduce-overhead)")
    args = ap.parse_args(argv)
    if os.path.exists(args.report):
        print("error: %s exists; reports are never overwritten" % args.report,
              file=sys.stderr)
        return 1
    if min(args.prompt_tokens, args.gen_tokens, args.iterations) < 1 or args.warmup < 0:
        print("error: token counts and iterations must be positive", file=sys.stderr)
        return 2

    import torch
    import transformers

    device = args.device
    started = time.gmtime()
    t_setup = time.perf_counter()
    raw, config, model = build_model(args.model, device)
    seed, source, prompt_file = args.seed, "seed", None
    if args.prompt_from:
        with open(args.prompt_from) as f:
            proto = json.load(f)["protocol"]
        prompt = proto["prompt_ids"]
        seed = int(proto["seed"])
        args.gen_tokens = proto["gen_tokens"]
        source, prompt_file = "report", args.prompt_from
    else:
        prompt = prompt_ids(raw, args.seed, args.prompt_tokens)
    context = len(prompt) + args.gen_tokens
    cache = make_cache(model, context, device)
    ids = torch.tensor([prompt], dtype=torch.long, device=device)

    def forward(x, pos):
        return model(input_ids=x, past_key_values=cache, cache_position=pos,
                     use_cache=True).logits[0, -1]

    step = torch.compile(forward, mode="reduce-overhead") if args.compile else forward
    synchronize(device)
    setup = time.perf_counter() - t_setup

    runs, first, same = [], None, True
    with torch.inference_mode():
        for i in range(args.warmup + args.iterations):
            total, prefill, decode, gen = execution(model, cache, ids, args.gen_tokens, step)
            tps = (args.gen_tokens - 1) / decode if args.gen_tokens > 1 and decode > 0 else 0.0
            runs.append(dict(measured=i >= args.warmup, total_seconds=total,
                             prefill_seconds=prefill, decode_seconds=decode,
                             decode_tokens_per_second=tps))
            if first is None:
                first = gen
            elif gen != first:
                same = False
            print("torch-baseline: %s %d: %.4f s" % ("warmup" if i < args.warmup else "execution",
                                                     i + 1, total), file=sys.stderr)
    ceiling = d2d_ceiling(device) if device != "cpu" else None
    measured = [r for r in runs if r["measured"]]
    totals = [r["total_seconds"] for r in measured]
    low, high = bench_summary.bootstrap(totals, bench_summary.median, RESAMPLES,
                                        bench_summary.stream_seed(seed, 0))
    prefill = bench_summary.median([r["prefill_seconds"] for r in measured])
    tps = bench_summary.median([r["decode_tokens_per_second"] for r in measured])
    wbytes = decode_weight_bytes(model, config)
    achieved = wbytes * tps
    cuda = device != "cpu"
    props = torch.cuda.get_device_properties(0) if cuda else None
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    report = {
        "format": "foundry.infer.report",
        "version": 1,
        "status": "ok",
        "error": None,
        "implementation": "transformers",
        "backend": "transformers-bf16" + ("-compiled" if args.compile else ""),
        "build": {"torch": torch.__version__, "transformers": transformers.__version__,
                  "cuda": torch.version.cuda, "python": platform.python_version()},
        "environment": {
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", started),
            "backend": device, "threads": None if cuda else torch.get_num_threads(),
            "device": {"name": props.name, "total_memory_bytes": props.total_memory}
            if cuda else None,
            "host": {"cpu_count": os.cpu_count(), "machine": platform.machine()},
        },
        "invocation": {"program": "torch_baseline.py", "argv": sys.argv},
        "model": {"path": args.model, "vocab_size": config.vocab_size,
                  "hidden_size": config.hidden_size, "layers": config.num_hidden_layers,
                  "group_size": raw["quantization"]["group_size"],
                  "decode_weight_bytes_per_token": wbytes},
        "protocol": {
            "name": "token-ids-512x128-v1" if (len(prompt), args.gen_tokens) == (512, 128)
            else "custom",
            "prompt_source": source, "prompt_file": prompt_file, "seed": str(seed),
            "prompt_tokens": len(prompt), "gen_tokens": args.gen_tokens, "ignore_eos": True,
            "warmup": args.warmup, "iterations": args.iterations,
            "bootstrap_resamples": RESAMPLES, "context": context, "prompt_ids": prompt,
            "execution": "static cache reset + one prefill forward + gen_tokens - 1 "
                         "single-token forwards, argmax on the device; setup outside",
        },
        "setup_seconds": setup,
        "memory": {"weights_resident": weights, "weights_slots": 0,
                   "kv_cache": kv_cache_bytes(cache), "activations": None, "io": None,
                   "workspace": None,
                   "device_in_use_bytes": torch.cuda.max_memory_allocated() if cuda
                   else None},
        "bandwidth": {"decode_weight_bytes_per_token": wbytes,
                      "achieved_bytes_per_second": achieved,
                      "d2d": {"method": "torch copy_ (bytes read + written)",
                              "bytes": CEILING_BYTES, "repeats": 10,
                              "bytes_per_second": ceiling} if ceiling else None,
                      "read_kernel": None,
                      "fraction_of_d2d": achieved / ceiling if ceiling else None,
                      "note": "achieved = weight bytes per decode token x median "
                              "decode tokens/s"},
        "executions": runs,
        "statistics": {
            "end_to_end": {"median_seconds": bench_summary.median(totals),
                           "median_ci_low_seconds": low, "median_ci_high_seconds": high,
                           "mean_seconds": bench_summary.mean(totals),
                           "stddev_seconds": bench_summary.stddev(totals),
                           "min_seconds": min(totals), "max_seconds": max(totals)},
            "prefill_median_seconds": prefill,
            "prefill_tokens_per_second": len(prompt) / prefill,
            "time_to_first_token_seconds": prefill,
            "decode_median_seconds": bench_summary.median([r["decode_seconds"] for r in measured]),
            "decode_tokens_per_second": tps,
        },
        "generated_ids": first,
        "ids_identical_across_executions": same,
    }
    with open(args.report, "x") as f:
        json.dump(report, f, indent=1)
    print("transformers bf16: end to end median %.4f s (95%% CI %.4f .. %.4f), prefill "
          "%.4f s (%.0f tokens/s), decode %.1f tokens/s, %.1f GB/s (device copy %s GB/s)"
          % (bench_summary.median(totals), low, high, prefill, len(prompt) / prefill,
             tps, achieved * 1e-9, "%.1f" % (ceiling * 1e-9) if ceiling else "not measured"))
    print("report: %s" % args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
