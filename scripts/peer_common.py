"""What the peers of `foundry infer-bench` share (scripts/torch_baseline.py,
scripts/mlx_baseline.py; make_reference_fixture.py too): the protocol
token-ids-512x128-v1 and its options, the seeded prompt rule, the prompt
taken from an infer-bench report, the bits of a checkpoint's linears and
the transformers classes of its family, the statistics of the executions
and the report's skeleton (foundry.infer.report version 3,
docs/infer-bench.md).

The prompt rule is infer-bench's (foundry/infer_bench.h): SplitMix64 with
initial state stream_seed(seed, 2 << 32), each id next() % vocab_size, drawn
again while it is the BOS id or an EOS id; sequence k of a batch from
seed + k (mod 2^64). Standard library only: a peer imports its framework
itself, after the usage checks.
"""
import hashlib
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_summary  # noqa: E402  (SplitMix64 and the statistics)

PROMPT_STREAM = 2 << 32
PROMPT_TOKENS = 512
GEN_TOKENS = 128
WARMUP = 2
ITERATIONS = 10
PROTOCOL = "token-ids-512x128-v1"
RESAMPLES = 10000
MAX_BATCH = 1024  # FDY_LLAMA_MAX_SEQUENCES
REPORT_FORMAT = "foundry.infer.report"
REPORT_VERSION = 3  # FDY_INFER_REPORT_VERSION: the fields of --batch
SEED_MASK = (1 << 64) - 1


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


def batch_prompts(config, seed, count, batch, first=None):
    """The prompts of a batch: sequence k's from seed + k (mod 2^64), or
    sequence 0's given as first (a report's prompt_ids)."""
    return [first if k == 0 and first is not None else
            prompt_ids(config, (seed + k) & SEED_MASK, count) for k in range(batch)]


# ---- options ----------------------------------------------------------------


def add_protocol_arguments(ap):
    """The options every peer takes: the model, the report and the
    protocol's shape."""
    ap.add_argument("--model", required=True, help="MLX 4-bit Llama checkpoint")
    ap.add_argument("--report", required=True, help="the JSON report (never overwritten)")
    ap.add_argument("--prompt-from", metavar="REPORT",
                    help="an infer-bench report: its prompt ids, seed and generated count")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-tokens", type=int, help="seeded prompt ids (%d)" % PROMPT_TOKENS)
    ap.add_argument("--gen-tokens", type=int,
                    help="ids generated per execution (%d, or the report's)" % GEN_TOKENS)
    ap.add_argument("--batch", type=int,
                    help="sequences decoded together, 1 to %d (1, or the report's); "
                         "sequence k's prompt from seed + k" % MAX_BATCH)
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--iterations", type=int, default=ITERATIONS)


def check_protocol_arguments(ap, args):
    """The usage checks of add_protocol_arguments' options (ap.error: exit
    2)."""
    if args.seed < 0:
        ap.error("--seed must be non-negative")
    for name in ("prompt_tokens", "gen_tokens", "iterations"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error("--%s must be positive" % name.replace("_", "-"))
    if args.warmup < 0:
        ap.error("--warmup must not be negative")
    if args.batch is not None and not 1 <= args.batch <= MAX_BATCH:
        ap.error("--batch must be from 1 to %d" % MAX_BATCH)
    if args.prompt_from and args.prompt_tokens is not None:
        ap.error("--prompt-from gives the prompt: --prompt-tokens does not apply")


class Refused(Exception):
    """Refused before any work: exit 1, no report written."""


def protocol_of(args, execution):
    """The report's protocol section from the options (and the
    --prompt-from report), prompt_ids None when they come from the seed
    (the peer fills them once it has read the model's config); execution
    says what one execution is. Raises Refused when the report exists or
    the prompt report is not one."""
    if os.path.exists(args.report):
        raise Refused("%s exists; reports are never overwritten" % args.report)
    seed, source, gen = args.seed, "seed", args.gen_tokens or GEN_TOKENS
    prompt, prompt_tokens = None, args.prompt_tokens or PROMPT_TOKENS
    batch = args.batch or 1
    if args.prompt_from:
        try:
            with open(args.prompt_from) as f:
                given = json.load(f)["protocol"]
            prompt, seed = list(given["prompt_ids"]), int(given["seed"])
            gen = args.gen_tokens or int(given["gen_tokens"])
            batch = args.batch or int(given.get("batch") or 1)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise Refused("%s is not an infer-bench report: %s" % (args.prompt_from, e))
        if not prompt:
            raise Refused("%s has no prompt ids" % args.prompt_from)
        source, prompt_tokens = "report", len(prompt)
        if not 1 <= batch <= MAX_BATCH:
            raise Refused("%s: batch %d is not 1 to %d" % (args.prompt_from, batch, MAX_BATCH))
        if batch > 1 and given.get("prompt_source") == "file":
            raise Refused("%s: a prompt file gives one prompt: no batch of %d"
                          % (args.prompt_from, batch))
    protocol = {
        "name": PROTOCOL if (prompt_tokens, gen) == (PROMPT_TOKENS, GEN_TOKENS) else "custom",
        "prompt_source": source, "prompt_file": args.prompt_from, "seed": str(seed),
        "prompt_tokens": prompt_tokens, "gen_tokens": gen, "batch": batch, "ignore_eos": True,
        "warmup": args.warmup, "iterations": args.iterations,
        "bootstrap_resamples": RESAMPLES, "context": prompt_tokens + gen,
        "prompt_ids": prompt,
        "sequence_prompts": "sequence k (0 to batch - 1): the prompt rule from seed + k "
                            "(mod 2^64); prompt_ids are sequence 0's",
        "execution": execution,
    }
    protocol["deviations"] = deviations(protocol)
    return protocol


def resolve_prompts(protocol, config, source_name):
    """The batch's prompts (lists of ids) for config.json `config`: the
    report's ids checked against the vocabulary, or the seeded ones (which
    are then recorded in protocol). Raises ValueError."""
    vocab = config["vocab_size"]
    prompt = protocol["prompt_ids"]
    if prompt is not None:
        if not all(isinstance(i, int) and 0 <= i < vocab for i in prompt):
            raise ValueError("%s: prompt ids outside the vocabulary of %d" % (source_name, vocab))
    else:
        prompt = prompt_ids(config, int(protocol["seed"]), protocol["prompt_tokens"])
        protocol["prompt_ids"] = prompt
    return batch_prompts(config, int(protocol["seed"]), len(prompt), protocol["batch"],
                         first=prompt)


def deviations(protocol):
    """The ways protocol differs from token-ids-512x128-v1."""
    out = []
    for key, want in (("prompt_tokens", PROMPT_TOKENS), ("gen_tokens", GEN_TOKENS),
                      ("warmup", WARMUP), ("iterations", ITERATIONS)):
        if protocol[key] != want:
            out.append("%s %d (protocol %d)" % (key, protocol[key], want))
    return out


# ---- the checkpoint ---------------------------------------------------------

# model_type -> the transformers classes' prefix (NAMEConfig, NAMEForCausalLM)
# of the families Foundry runs
TRANSFORMERS_CLASSES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2",
                        "qwen3": "Qwen3"}


def module_bits(config, names, prefix):
    """A linear's bits as mlx-lm loads it, from config.json and the
    checkpoint's tensor names (any container): its entry in quantization
    (false: unquantized), else unquantized without quantization or without
    PREFIX.scales, else the default bits; 0 means unquantized."""
    quant = config.get("quantization")
    if not quant:
        return 0
    entry = quant.get(prefix)
    if entry is False:
        return 0
    if isinstance(entry, dict):
        return entry["bits"]
    return quant["bits"] if prefix + ".scales" in names else 0


# ---- the report -------------------------------------------------------------


class Failure(Exception):
    """A failed run: the stage (setup, compile, executions, statistics) and
    why."""

    def __init__(self, stage, message):
        super().__init__(message)
        self.stage = stage


def new_report(implementation, backend, program, environment_backend, model, protocol, peer):
    """A report with status "failed" and every measured field empty."""
    return {
        "format": REPORT_FORMAT, "version": REPORT_VERSION, "status": "failed",
        "error": None,
        "implementation": implementation,
        "backend": backend,
        "build": {"python": platform.python_version()},
        "environment": {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "backend": environment_backend, "threads": None, "device": None,
                        "host": {"cpu_count": os.cpu_count(), "machine": platform.machine()}},
        "invocation": {"program": program, "argv": sys.argv},
        "model": {"path": model},
        "protocol": protocol,
        "peer": peer,
        "setup_seconds": None, "memory": None, "weights": None, "bandwidth": None,
        "streaming": None, "executions": [], "statistics": None, "generated_ids": None,
        "generated_ids_by_sequence": None, "ids_identical_across_executions": None,
    }


def checkpoint_record(model_dir):
    """model.checkpoint of a report, as infer-bench records it: every file
    of the checkpoint directory (regular files, symbolic links followed,
    names not starting with ".", subdirectories not entered; names in byte
    order) with its bytes and SHA-256, the seconds hashing took (outside
    the timings) and no manifest. Raises OSError."""
    t0 = time.perf_counter()
    files = []
    for name in sorted(os.listdir(model_dir), key=os.fsencode):
        path = os.path.join(model_dir, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        h, size = hashlib.sha256(), 0
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                size += len(chunk)
        files.append({"name": name, "bytes": size, "sha256": h.hexdigest()})
    return {"files": files, "hash_seconds": time.perf_counter() - t0, "manifest": None}


def execution_record(measured, total, prefill, decode, steps, batch):
    """One entry of the report's executions."""
    tps = len(steps) / decode if steps and decode > 0 else 0.0
    return dict(measured=measured, total_seconds=total, prefill_seconds=prefill,
                decode_seconds=decode, decode_tokens_per_second=tps,
                aggregate_decode_tokens_per_second=batch * tps, decode_step_seconds=steps)


def step_statistics(measured):
    """p50, p99 (bench_summary's interpolated percentiles), mean and count of
    the decode steps of the measured executions, or None without steps."""
    steps = [t for r in measured for t in r["decode_step_seconds"]]
    if not steps:
        return None
    mean = bench_summary.mean(steps)
    steps.sort()
    return {"p50": bench_summary.percentile_sorted(steps, 0.50),
            "p99": bench_summary.percentile_sorted(steps, 0.99),
            "mean": mean, "count": len(steps)}


def statistics(runs, prompt_tokens, batch, seed):
    measured = [r for r in runs if r["measured"]]
    totals = [r["total_seconds"] for r in measured]
    low, high = bench_summary.bootstrap(totals, bench_summary.median, RESAMPLES,
                                        bench_summary.stream_seed(seed, 0))
    prefill = bench_summary.median([r["prefill_seconds"] for r in measured])
    return {
        "end_to_end": {"median_seconds": bench_summary.median(totals),
                       "median_ci_low_seconds": low, "median_ci_high_seconds": high,
                       "mean_seconds": bench_summary.mean(totals),
                       "stddev_seconds": bench_summary.stddev(totals),
                       "min_seconds": min(totals), "max_seconds": max(totals)},
        "prefill_median_seconds": prefill,
        "prefill_tokens_per_second": batch * prompt_tokens / prefill,
        "time_to_first_token_seconds": prefill,
        "decode_median_seconds": bench_summary.median([r["decode_seconds"] for r in measured]),
        "decode_tokens_per_second": bench_summary.median(
            [r["decode_tokens_per_second"] for r in measured]),
        "aggregate_decode_tokens_per_second": bench_summary.median(
            [r["aggregate_decode_tokens_per_second"] for r in measured]),
        "decode_step_seconds": step_statistics(measured),
    }


def finish_executions(report, runs, first, same):
    """Records the executions, the first execution's ids of each sequence
    and the statistics in report."""
    proto = report["protocol"]
    report["executions"] = runs
    report["generated_ids"] = first[0]
    report["generated_ids_by_sequence"] = first
    report["ids_identical_across_executions"] = same
    report["statistics"] = statistics(runs, len(proto["prompt_ids"]), proto["batch"],
                                      int(proto["seed"]))


def write_report(path, report):
    """Writes report to path, which must not exist (mode "x")."""
    with open(path, "x") as f:
        json.dump(report, f, indent=1)


def print_summary(report, label, d2d=True):
    """The console lines of a successful report: end to end, prefill,
    decode (and the bandwidth with d2d), the batch and the deviations."""
    s, b = report["statistics"], report["bandwidth"]
    e2e = s["end_to_end"]
    line = ("%s: end to end median %.4f s (95%% CI %.4f .. %.4f), prefill %.4f s "
            "(%.0f tokens/s), decode %.1f tokens/s"
            % (label, e2e["median_seconds"], e2e["median_ci_low_seconds"],
               e2e["median_ci_high_seconds"], s["prefill_median_seconds"],
               s["prefill_tokens_per_second"], s["decode_tokens_per_second"]))
    if d2d:
        ceiling = b["d2d"]["bytes_per_second"] if b["d2d"] else None
        line += ", %.1f GB/s (device copy %s GB/s)" % (
            b["achieved_bytes_per_second"] * 1e-9,
            "%.1f" % (ceiling * 1e-9) if ceiling else "not measured")
    print(line)
    steps = s["decode_step_seconds"]
    print("batch of %d: decode %.1f tokens/s aggregate%s"
          % (report["protocol"]["batch"], s["aggregate_decode_tokens_per_second"],
             "; decode step p50 %.3f ms, p99 %.3f ms" % (steps["p50"] * 1e3, steps["p99"] * 1e3)
             if steps else ""))


def print_deviations(report):
    if report["protocol"]["deviations"]:
        print("not the %s protocol: %s"
              % (PROTOCOL, ", ".join(report["protocol"]["deviations"])))
