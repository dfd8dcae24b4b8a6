#!/usr/bin/env python3
"""The Hugging Face transformers peer of `foundry infer-bench`.

Reads the same MLX checkpoint (4-bit, 8-bit, unquantized or mixed: each
linear's bits as mlx-lm reads them), dequantizes every weight exactly as MLX
does (w = scale * q + bias per group, q the 4- or 8-bit values of each
little-endian uint32, lowest first) to bfloat16 (or float32), builds the
transformers model of config.json's model_type (LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM; tied embeddings
and llama3 rope scaling as configured, sdpa attention) and runs the infer-bench protocol with a
transformers StaticCache, the way transformers generates fast: the prompt
in one eager forward pass (LM head on the last position only), then
gen_tokens - 1 single-token passes, each feeding back the argmax computed on
the device; EOS ignored, no host synchronization inside an execution.

Modes:
  compile  (default) the decode pass is torch.compile(mode="reduce-overhead",
           fullgraph=True): CUDA graphs replayed per token, as transformers'
           generate() does with a static cache. The prefill stays eager (the
           transformers advice). One unmeasured execution compiles and
           records the graphs: its time is `compile_seconds`, outside the
           measurement like setup.
  eager    the same loop without torch.compile.
  --offload-budget SIZE
           Hugging Face Accelerate CPU offload: the device map of
           infer_auto_device_map under max_memory {0: SIZE, "cpu": host},
           dispatched with dispatch_model (what from_pretrained(device_map=
           "auto", max_memory=...) does); every offloaded layer's weights
           are copied to the GPU in each forward pass. Eager only. It is slow
           (about 1 token/s for a 3B model): --gen-tokens, --warmup and
           --iterations shorten the run, and the report records them.

Batch (--batch B, default 1 or the --prompt-from report's): B sequences,
sequence k's prompt from seed + k (mod 2^64) by the rule below (sequence 0's
is the prompt of a batch of one), decoded together the way transformers'
generate() decodes a batch: the StaticCache holds B rows, the B prompts
(all of one length: no padding) are prefilled in one forward pass of
(B, prompt) ids, and each decode pass feeds a (B, 1) tensor of the previous
argmaxes. Resident, compiled or eager, and under --offload-budget alike.

Timing: torch.cuda.synchronize() before and after each execution (the host
clock gives total_seconds); CUDA events (the host clock on the CPU) mark the
first argmax on the device and the end of every decode pass, so they split
prefill from decode and time each decode step (device time between the
marks, no host synchronization inside an execution). Warmup executions are
discarded. The report has the schema of foundry.infer.report version 3
(docs/infer-bench.md; the fields this peer can fill) with implementation
"transformers", backend "transformers-<dtype>-<mode>[-offload]" and a
"peer" section (mode, dtype, attention, cache, compilation, offload); it is
never overwritten.

The prompt is either taken from an infer-bench report (--prompt-from: the
same ids, seed, generated count and batch) or made from --seed by the
infer-bench rule (foundry/infer_bench.h): SplitMix64 with initial state
stream_seed(seed, 2 << 32), each id next() % vocab_size, drawn again while
it is the BOS id or an EOS id.

usage:
  torch_baseline.py --model DIR --report PATH [--prompt-from REPORT]
      [--seed S] [--prompt-tokens N] [--gen-tokens N] [--batch B]
      [--warmup N] [--iterations N] [--mode compile|eager]
      [--offload-budget SIZE] [--device cuda|cpu] [--dtype bfloat16|float32]
exit: 0 success, 1 failure (model, an existing report, a run that fails),
      2 usage error
"""
import argparse
import json
import os
import re
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_summary  # noqa: E402  (the median of the ceilings)
# the protocol, the prompt rule, the statistics and the report (shared with
# scripts/mlx_baseline.py); prompt_ids and batch_prompts stay importable from
# here (the tests check the prompt rule through this module)
from peer_common import (TRANSFORMERS_CLASSES, Failure, Refused,  # noqa: E402
                         add_protocol_arguments, check_protocol_arguments, checkpoint_record,
                         execution_record, finish_executions, module_bits, new_report,
                         print_deviations, print_summary, protocol_of, resolve_prompts,
                         write_report)
from peer_common import batch_prompts, prompt_ids, special_ids  # noqa: E402,F401

CEILING_BYTES = 512 << 20
UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def parse_bytes(text):
    """Bytes of "123", "123B", "64KiB", "450MiB", "4GiB", "1TiB" (binary units,
    an optional single space before the unit), as fdy_parse_bytes reads
    them. Raises ValueError on anything else, zero included."""
    m = re.fullmatch(r"([0-9]+) ?([A-Za-z]*)", text)
    if not m or m.group(2) not in UNITS or (m.group(2) == "" and " " in text):
        raise ValueError("%r is not a size (e.g. 2GiB, 512MiB, 1073741824)" % text)
    value = int(m.group(1)) * UNITS[m.group(2)]
    if value == 0 or value >= 1 << 64:
        raise ValueError("%r is not a positive 64-bit size" % text)
    return value


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


def dequantize(packed, scales, biases, shifts):
    """Rows of scale * q + bias: packed (out, in * bits / 32) words as signed
    64-bit integers holding the uint32 values, scales and biases (out,
    groups) as floats, shifts = [0, bits, 2 * bits, ..., 32 - bits] (the
    values of a word, lowest first) in the array library of packed (numpy or
    torch). Returns (out, in)."""
    bits = 32 // len(shifts)
    q = (packed[..., None] >> shifts) & ((1 << bits) - 1)
    rows, groups = scales.shape
    q = q.reshape(rows, groups, -1)
    w = q * scales[..., None] + biases[..., None]
    return w.reshape(rows, -1)


def load_state_dict(model_dir, config, device, dtype):
    """The checkpoint's tensors dequantized to dtype on device (computed in
    float32: scale * q + bias, each linear with its own bits), by the
    transformers names."""
    import torch

    dtypes = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
              "U32": torch.int32, "I32": torch.int32}
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
            bits = module_bits(config, header, prefix) if key.endswith(".weight") else 0
            if bits:
                packed = tensor(key).to(torch.int64) & 0xFFFFFFFF
                shifts = torch.arange(0, 32, bits, dtype=torch.int64, device=device)
                w = dequantize(packed, tensor(prefix + ".scales").float(),
                               tensor(prefix + ".biases").float(), shifts)
                state[key] = w.to(dtype)
            else:
                state[key] = tensor(key).to(dtype)
        del data
    return state


def build_model(model_dir, device, dtype):
    """(config.json as read, the family's transformers config, its
    ForCausalLM model in eval mode with the checkpoint's weights in dtype on
    device, sdpa attention). ValueError for a model_type Foundry does not
    run."""
    import torch
    import transformers

    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    model_type = raw.get("model_type", "llama")
    if model_type not in TRANSFORMERS_CLASSES:
        raise ValueError("model_type '%s' is none of %s"
                         % (model_type, ", ".join(sorted(TRANSFORMERS_CLASSES))))
    family = TRANSFORMERS_CLASSES[model_type]
    fields = {k: v for k, v in raw.items()
              if k not in ("quantization", "quantization_config", "torch_dtype", "dtype")}
    config = getattr(transformers, family + "Config")(**fields, dtype=dtype,
                                                      attn_implementation="sdpa")
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = getattr(transformers, family + "ForCausalLM")(config)
    finally:
        torch.set_default_dtype(torch.float32)
    state = load_state_dict(model_dir, raw, device, dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    del state
    allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if unexpected or set(missing) - allowed:
        raise RuntimeError("checkpoint and model disagree: missing %s, unexpected %s"
                           % (missing, unexpected))
    if config.tie_word_embeddings:
        model.tie_weights()
        if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
            raise RuntimeError("the LM head is not tied to the embedding table")
    model.eval()
    return raw, config, model


# ---- placement: resident or Accelerate CPU offload --------------------------


def offload_device_map(model, budget, host_bytes):
    """Accelerate's device map of model for a device weight budget: what
    from_pretrained(device_map="auto", max_memory={0: budget, "cpu": host})
    computes (decoder layers are never split)."""
    from accelerate import infer_auto_device_map

    return infer_auto_device_map(model, max_memory={0: budget, "cpu": host_bytes},
                                 no_split_module_classes=[
                                     type(model.model.layers[0]).__name__])


def device_of(device_map, name):
    """The device_map entry of a parameter or module name (its longest
    prefix in the map)."""
    parts = name.split(".")
    for n in range(len(parts), -1, -1):
        key = ".".join(parts[:n])
        if key in device_map:
            return device_map[key]
    raise KeyError("%s has no device in the map" % name)


def placement_bytes(model, device_map):
    """(bytes on the device, bytes offloaded to the host, bytes a forward pass
    copies host-to-device) of the parameters under device_map. Each
    offloaded entry of the map has a hook that copies its parameters to the
    device for its forward pass: a tied table offloaded both as the
    embedding and as the LM head is copied twice."""
    resident = offloaded = 0
    for name, p in model.named_parameters():
        size = p.numel() * p.element_size()
        if device_of(device_map, name) in ("cpu", "disk"):
            offloaded += size
        else:
            resident += size
    copied = 0
    for key, device in device_map.items():
        if device in ("cpu", "disk"):
            module = model.get_submodule(key) if key else model
            copied += sum(p.numel() * p.element_size() for p in module.parameters())
    return resident, offloaded, copied


def dispatch_offloaded(model, device_map):
    """Moves the model to the host and dispatches it with Accelerate as
    from_pretrained does: modules mapped to 0 live on the GPU, the others are
    copied to it in each forward pass; the KV cache is not moved."""
    import torch
    from accelerate import dispatch_model

    model.to("cpu")
    torch.cuda.empty_cache()
    return dispatch_model(model, device_map=device_map, main_device=0,
                          skip_keys=model._skip_keys_device_placement)


# ---- the protocol -----------------------------------------------------------


def make_cache(config, length):
    from transformers import StaticCache

    return StaticCache(config=config, max_cache_len=length)


def kv_cache_bytes(cache):
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None:
                total += t.numel() * t.element_size()
    return total


class Clock:
    """Marks in an execution: CUDA events on a GPU (device time between
    marks, no host synchronization), the host clock on the CPU."""

    def __init__(self, device, marks):
        import torch

        self.cuda = device != "cpu"
        self.torch = torch
        if self.cuda:
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(marks)]
        self.times = [0.0] * marks

    def synchronize(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def mark(self, i):
        if self.cuda:
            self.events[i].record()
        else:
            self.times[i] = time.perf_counter()

    def seconds(self, a, b):
        """Seconds from mark a to mark b (after synchronize())."""
        if self.cuda:
            return self.events[a].elapsed_time(self.events[b]) * 1e-3
        return self.times[b] - self.times[a]


class Generator:
    """Greedy generation of a batch with a StaticCache: the prefill pass
    eager, the decode pass eager or compiled (mode reduce-overhead,
    fullgraph: CUDA graphs). Every id stays on the device: the decode input
    is one static (batch, 1) tensor that each step's argmaxes are copied
    into."""

    def __init__(self, model, cache, device, compiled, batch):
        import torch

        self.torch = torch
        self.model, self.cache, self.compiled = model, cache, compiled
        self.token = torch.zeros((batch, 1), dtype=torch.long, device=device)
        decode = self._argmax_of_next
        if compiled:
            torch._dynamo.mark_static_address(self.token)
            decode = torch.compile(decode, mode="reduce-overhead", fullgraph=True)
        self._decode = decode

    def _argmax_of_next(self, ids):
        logits = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True,
                            logits_to_keep=1).logits
        return logits[:, -1].argmax(-1)

    def run(self, prompts, out, clock):
        """Fills out (batch, gen_tokens ids) from the prompts (batch, P);
        marks 0 at the start, 1 after the first argmaxes, 1 + i after decode
        pass i (1 to gen_tokens - 1)."""
        clock.mark(0)
        self.cache.reset()
        first = self._argmax_of_next(prompts)
        out[:, 0] = first
        self.token.copy_(first.view(-1, 1))
        clock.mark(1)
        for i in range(1, out.shape[1]):
            if self.compiled:
                self.torch.compiler.cudagraph_mark_step_begin()
            nxt = self._decode(self.token)
            out[:, i] = nxt
            self.token.copy_(nxt.view(-1, 1))
            clock.mark(1 + i)


def execution(generator, prompts, out, clock):
    """One reset + prefill + decode, out poisoned first: (total, prefill,
    decode seconds, each decode step's seconds, ids of each sequence)."""
    out.fill_(-1)
    clock.synchronize()
    t0 = time.perf_counter()
    generator.run(prompts, out, clock)
    clock.synchronize()
    total = time.perf_counter() - t0
    gen = out.shape[1]
    steps = [clock.seconds(i, i + 1) for i in range(1, gen)]
    return total, clock.seconds(0, 1), clock.seconds(1, gen), steps, out.tolist()


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


def h2d_ceilings(device):
    """Host-to-device copy bandwidth in bytes per second from page-locked and
    from pageable host memory (512 MiB, median of 5 after one warm copy)."""
    import torch

    dst = torch.empty(CEILING_BYTES, dtype=torch.uint8, device=device)
    out = {}
    for name, pinned in (("pinned", True), ("pageable", False)):
        src = torch.ones(CEILING_BYTES, dtype=torch.uint8, pin_memory=pinned)
        dst.copy_(src, non_blocking=pinned)
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=pinned)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out[name] = CEILING_BYTES / bench_summary.median(times)
        del src
    del dst
    return out


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


# ---- the command ------------------------------------------------------------


def parse_args(argv):
    """The options, after every usage check (argparse exits 2 on an error)."""
    ap = argparse.ArgumentParser(prog="torch_baseline.py",
                                 description=__doc__.split("\n")[0])
    add_protocol_arguments(ap)
    ap.add_argument("--mode", choices=("compile", "eager"),
                    help="torch.compile the decode pass or not (compile; eager with "
                         "--offload-budget)")
    ap.add_argument("--offload-budget", metavar="SIZE",
                    help="Accelerate CPU offload under a device weight budget (2GiB, 512MiB)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="torch device (cpu only to test the script)")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                    help="weights and activations (float32 only to test the script)")
    args = ap.parse_args(argv)
    check_protocol_arguments(ap, args)
    args.budget = None
    if args.offload_budget is not None:
        try:
            args.budget = parse_bytes(args.offload_budget)
        except ValueError as e:
            ap.error("--offload-budget: %s" % e)
        if args.device != "cuda":
            ap.error("--offload-budget offloads to a CUDA device: not with --device cpu")
        if args.mode == "compile":
            ap.error("--offload-budget runs eager (Accelerate's hooks are not compiled)")
    if args.mode is None:
        args.mode = "eager" if args.budget else "compile"
    return args


def run(args, report):
    """Fills report (status ok) or raises Failure."""
    import torch
    import transformers

    cuda = args.device == "cuda"
    dtype = getattr(torch, args.dtype)
    report["build"].update(torch=torch.__version__, transformers=transformers.__version__,
                           cuda=torch.version.cuda)
    if cuda and not torch.cuda.is_available():
        raise Failure("setup", "no CUDA device (torch %s)" % torch.__version__)
    if args.budget:
        try:
            import accelerate
        except ImportError:
            raise Failure("setup", "--offload-budget needs Hugging Face Accelerate "
                                   "(pip install accelerate)")
        report["build"]["accelerate"] = accelerate.__version__

    try:
        report["model"]["checkpoint"] = checkpoint_record(args.model)
    except OSError as e:
        raise Failure("setup", "model %s: %s" % (args.model, e))
    t_setup = time.perf_counter()
    try:
        raw, config, model = build_model(args.model, args.device, dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise Failure("setup", "model %s: %s" % (args.model, e))
    proto = report["protocol"]
    batch = proto["batch"]
    try:
        prompts = resolve_prompts(proto, raw, args.prompt_from)
    except ValueError as e:
        raise Failure("setup", str(e))
    prompt = prompts[0]
    wbytes = decode_weight_bytes(model, config)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    peer = report["peer"]
    resident, offloaded = weights, 0
    if args.budget:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        device_map = offload_device_map(model, args.budget, host)
        resident, offloaded, copied = placement_bytes(model, device_map)
        if not resident:
            raise Failure("setup", "--offload-budget %d bytes: Accelerate places no weight on "
                                   "the device (a decoder layer needs more)" % args.budget)
        model = dispatch_offloaded(model, device_map)
        peer["offload"] = {
            "method": "accelerate infer_auto_device_map + dispatch_model (CPU offload)",
            "budget_bytes": args.budget, "max_memory": {"0": args.budget, "cpu": host},
            "device_map": {k: str(v) for k, v in device_map.items()},
            "layers_on_device": sum(
                1 for i in range(config.num_hidden_layers)
                if device_of(device_map, "model.layers.%d" % i) not in ("cpu", "disk")),
            "weights_resident_bytes": resident, "weights_offloaded_bytes": offloaded,
            "streamed_bytes_per_token": copied,
        }
    else:
        off_device = {str(p.device) for p in model.parameters()} - {str(torch.device(
            args.device, 0) if cuda else torch.device("cpu"))}
        if off_device:
            raise Failure("setup", "weights not on %s: %s" % (args.device, off_device))
    context = len(prompt) + proto["gen_tokens"]
    proto["context"] = context
    cache = make_cache(config, context)
    ids = torch.tensor(prompts, dtype=torch.long, device=args.device)
    out = torch.empty((batch, proto["gen_tokens"]), dtype=torch.long, device=args.device)
    clock = Clock(args.device, proto["gen_tokens"] + 1)
    generator = Generator(model, cache, args.device, args.mode == "compile", batch)
    clock.synchronize()
    report["setup_seconds"] = time.perf_counter() - t_setup
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    runs, first, same = [], None, True
    with torch.no_grad():  # as generate() runs
        if args.mode == "compile":
            t0 = time.perf_counter()
            try:
                _, _, _, _, first = execution(generator, ids, out, clock)
            except Exception as e:  # torch.compile raises many kinds
                raise Failure("compile", "%s: %s" % (type(e).__name__, e))
            peer["compile"]["seconds"] = time.perf_counter() - t0
            print("torch-baseline: compile execution: %.1f s" % peer["compile"]["seconds"],
                  file=sys.stderr)
        for i in range(args.warmup + args.iterations):
            try:
                total, prefill, decode, steps, gen = execution(generator, ids, out, clock)
            except Exception as e:
                raise Failure("executions", "execution %d: %s: %s" % (i + 1, type(e).__name__, e))
            runs.append(execution_record(i >= args.warmup, total, prefill, decode, steps,
                                         batch))
            if first is None:
                first = gen
            same = same and gen == first
            print("torch-baseline: %s %d: %.4f s" % ("warmup" if i < args.warmup else "execution",
                                                     i + 1, total), file=sys.stderr)
    finish_executions(report, runs, first, same)
    tps = report["statistics"]["decode_tokens_per_second"]
    ceiling = d2d_ceiling(args.device) if cuda else None
    achieved = wbytes * tps
    props = torch.cuda.get_device_properties(0) if cuda else None
    report["environment"].update(
        threads=None if cuda else torch.get_num_threads(),
        device={"name": props.name if cuda else "cpu",
                "total_memory_bytes": props.total_memory if cuda else None})
    report["model"].update(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                           layers=config.num_hidden_layers,
                           group_size=(raw.get("quantization") or {}).get("group_size", 0),
                           decode_weight_bytes_per_token=wbytes)
    streamed = peer["offload"]["streamed_bytes_per_token"] if args.budget else 0
    report["weights"] = {"resident_bytes": resident, "streamed_bytes_per_decode_token": streamed,
                         "streamed_bytes_per_decode_step": streamed}
    report["memory"] = {"weights_resident": resident, "weights_slots": 0,
                        "weights_offloaded": offloaded, "kv_cache": kv_cache_bytes(cache),
                        "activations": None, "io": None, "workspace": None,
                        "device_in_use_bytes": torch.cuda.max_memory_allocated() if cuda
                        else None}
    report["bandwidth"] = {
        "decode_weight_bytes_per_token": wbytes, "achieved_bytes_per_second": achieved,
        "d2d": {"method": "torch copy_ (bytes read + written)", "bytes": CEILING_BYTES,
                "repeats": 10, "bytes_per_second": ceiling} if ceiling else None,
        "read_kernel": None,
        "fraction_of_d2d": achieved / ceiling if ceiling else None,
        "note": "achieved = weight bytes per decode token x median decode tokens/s"}
    if args.budget:
        h2d = h2d_ceilings(args.device)
        bound = h2d["pinned"] / streamed if streamed else None
        peer["offload"].update(
            h2d_pinned_bytes_per_second=h2d["pinned"],
            h2d_pageable_bytes_per_second=h2d["pageable"],
            decode_fraction_of_pinned_bound=tps / bound if bound else None)
        report["streaming"] = {
            "streamed_bytes_per_decode_token": streamed,
            "h2d": {"method": "torch copy_ from pinned host memory", "bytes": CEILING_BYTES,
                    "repeats": 5, "bytes_per_second": h2d["pinned"]},
            "decode_tokens_per_second_bound": bound,
            "fraction_of_bound": tps / bound if bound else None,
            "aggregate_decode_tokens_per_second_bound": batch * bound if bound else None,
            "note": "bound = pinned h2d ceiling / bytes Accelerate copies per forward pass "
                    "(one decode step of every sequence); aggregate bound = batch x bound"}
    report["status"] = "ok"


def main(argv):
    args = parse_args(argv)
    execution = ("StaticCache (batch rows) reset + one eager prefill forward of the batch's "
                 "prompts (LM head on the last position) + gen_tokens - 1 forwards of one "
                 "token per sequence (%s), argmaxes on the device fed back without host "
                 "synchronization, a CUDA event after each; setup%s outside"
                 % ("torch.compile reduce-overhead: CUDA graphs" if args.mode == "compile"
                    else "eager", " and the compile execution" if args.mode == "compile"
                    else ""))
    try:
        protocol = protocol_of(args, execution)
    except Refused as e:
        print("torch_baseline.py: error: %s" % e, file=sys.stderr)
        return 1
    mode = args.mode + ("-offload" if args.budget else "")
    report = new_report(
        "transformers", "transformers-%s-%s" % ("bf16" if args.dtype == "bfloat16" else "f32",
                                                mode),
        "torch_baseline.py", args.device, args.model, protocol,
        {"mode": args.mode, "dtype": args.dtype, "attention": "sdpa",
         "cache": "transformers StaticCache",
         "compile": {"target": "decode forward + argmax", "mode": "reduce-overhead",
                     "fullgraph": True, "seconds": None}
         if args.mode == "compile" else None,
         "offload": None})
    try:
        run(args, report)
    except Failure as e:
        report["error"] = {"stage": e.stage, "message": str(e)}
        print("torch_baseline.py: error: %s: %s" % (e.stage, e), file=sys.stderr)
    write_report(args.report, report)
    if report["status"] != "ok":
        print("report: %s (failed)" % args.report)
        return 1
    print_summary(report, "transformers %s %s" % (args.dtype, mode))
    if report["streaming"]:
        print("streamed: %.1f tokens/s aggregate bound (pinned host-to-device / bytes copied "
              "per step)" % report["streaming"]["aggregate_decode_tokens_per_second_bound"])
    if report["peer"]["compile"]:
        print("compile execution (outside the measurement): %.1f s"
              % report["peer"]["compile"]["seconds"])
    off = report["peer"]["offload"]
    if off:
        print("offload: budget %d bytes, %d layers on the device, %.3f GB resident, %.3f GB "
              "copied per token; host-to-device %.1f GB/s pinned, %.1f GB/s pageable"
              % (off["budget_bytes"], off["layers_on_device"],
                 off["weights_resident_bytes"] * 1e-9, off["streamed_bytes_per_token"] * 1e-9,
                 off["h2d_pinned_bytes_per_second"] * 1e-9,
                 off["h2d_pageable_bytes_per_second"] * 1e-9))
    print_deviations(report)
    print("report: %s" % args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
