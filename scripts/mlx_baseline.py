#!/usr/bin/env python3
"""The MLX peer of `foundry infer-bench`: mlx-lm on the same checkpoint.

Loads the MLX 4-bit checkpoint with mlx-lm (mlx_lm.utils.load_model: the
checkpoint unchanged, QuantizedLinear and QuantizedEmbedding layers that
compute with mx.quantized_matmul) and runs the infer-bench protocol the way
mlx-lm generates (mlx_lm.generate.generate_step): a KV cache from
make_prompt_cache, new for each execution; the prompt in one forward pass
of (batch, prompt) ids whose LM head MLX evaluates on the last position
only (lazy evaluation), then gen_tokens - 1 passes of one id per sequence,
each feeding back the argmax on the device. Like generate_step, the pass
of step i + 1 is queued (mx.async_eval) before step i's ids are read back,
so the device never waits for the host; unlike it, the prompt is one pass
(generate_step runs prompt[:-1] and then the last id; infer-bench and the
transformers peer run it as one) and no pass is queued after the last id.
Greedy, EOS ignored.

The activations take the dtype of the checkpoint's scales and norms (what
mlx-lm runs: float16 for the mlx-community F16 checkpoints) or, with
--dtype, the model is cast to it first (nn.Module.set_dtype: every
floating parameter; the packed 4-bit words stay). --dtype float32 on the
CPU (--device cpu) is for testing: its greedy ids equal Foundry's CPU
backend's.

Timing: the host clock. Each execution starts with nothing queued; its
prefill ends when the first ids are on the host (time to first token),
decode step i when step i's ids are (so each step's time includes the
queueing of the next), the execution when the last ids are. 2 warmup
executions are discarded, 10 are measured (the options change that and
the report lists the deviations). The report is a foundry.infer.report
version 3 (docs/infer-bench.md; the fields this peer can fill) with
implementation "mlx", backend "mlx-<f16|bf16|f32>", the MLX and mlx-lm
versions in `build`, the device (mx.device_info()) in `environment` and a
"peer" section; it is never overwritten.

The prompt is either taken from an infer-bench report (--prompt-from: the
same ids, seed, generated count and batch) or made from --seed by the
infer-bench rule (scripts/peer_common.py); sequence k of a batch from
seed + k.

usage:
  mlx_baseline.py --model DIR --report PATH [--prompt-from REPORT]
      [--seed S] [--prompt-tokens N] [--gen-tokens N] [--batch B]
      [--warmup N] [--iterations N] [--device gpu|cpu]
      [--dtype native|float16|bfloat16|float32]
exit: 0 success, 1 failure (model, an existing report, a run that fails),
      2 usage error
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import (Failure, Refused, add_protocol_arguments,  # noqa: E402
                         check_protocol_arguments, checkpoint_record, execution_record,
                         finish_executions, new_report, print_deviations, print_summary,
                         protocol_of, resolve_prompts, write_report)

DTYPES = ("native", "float16", "bfloat16", "float32")
SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
EXECUTION = ("a new mlx_lm KVCache (make_prompt_cache) + one forward of the batch's prompts "
             "(LM head evaluated on the last position only) + gen_tokens - 1 forwards of one "
             "id per sequence, each argmax fed back on the device and the next pass queued "
             "(mx.async_eval) before the ids are read back, as mlx_lm generate_step does; "
             "host clock; setup outside")


# ---- the model --------------------------------------------------------------


def load(model_dir, dtype="native"):
    """(mlx, model, config.json as read, the activations' dtype name): the
    checkpoint loaded by mlx-lm, cast to dtype unless "native", every
    parameter evaluated. Raises what mlx-lm raises on a bad checkpoint."""
    from pathlib import Path

    import mlx.core as mx
    from mlx_lm.utils import load_model

    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    model, _ = load_model(Path(model_dir))
    if dtype != "native":
        model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())
    # the final norm's weight has the activations' dtype (the scales' too)
    name = str(model.model.norm.weight.dtype).replace("mlx.core.", "")
    return mx, model, raw, name


def parameter_bytes(model):
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def decode_weight_bytes(model):
    """Weight bytes a decode token reads, as infer-bench counts them: every
    parameter once, the embedding table one row (plus the whole table again
    as the LM head when tied)."""
    from mlx.utils import tree_flatten

    emb = model.model.embed_tokens
    table = sum(v.nbytes for _, v in tree_flatten(emb.parameters()))
    rows = emb.weight.shape[0]
    total = parameter_bytes(model) - table + table // rows
    if not hasattr(model, "lm_head"):  # tied: mlx-lm's llama has no lm_head then
        total += table
    return total


def device_of(mx, name):
    """(the device's name for the report, mx.device_info() as a dict of
    strings and numbers): "cpu" on the CPU, as infer-bench writes it."""
    try:
        info = dict(mx.device_info())
    except (AttributeError, RuntimeError, TypeError):
        info = {}
    info = {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
            for k, v in info.items()}
    return ("cpu" if name == "cpu" else str(info.get("device_name", name))), info


def gpu_available(mx):
    """Whether MLX has a GPU (CUDA or Metal); MLX before mx.is_available
    counts devices."""
    if hasattr(mx, "is_available"):
        return bool(mx.is_available(mx.gpu))
    try:
        return mx.device_count(mx.gpu) > 0
    except (AttributeError, RuntimeError, ValueError):
        return False


# ---- the protocol -----------------------------------------------------------


def execution(mx, model, prompts, gen):
    """One execution: (total, prefill, decode seconds, each decode step's
    seconds, the ids of each sequence, the KV cache it filled)."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    t0 = time.perf_counter()
    y = mx.argmax(model(prompts, cache=cache)[:, -1, :], axis=-1)
    mx.async_eval(y)
    marks, ids = [], []
    for i in range(gen):
        if i + 1 < gen:
            nxt = mx.argmax(model(y[:, None], cache=cache)[:, -1, :], axis=-1)
            mx.async_eval(nxt)
        ids.append(y.tolist())  # waits for step i
        marks.append(time.perf_counter())
        if i + 1 < gen:
            y = nxt
    steps = [marks[i + 1] - marks[i] for i in range(gen - 1)]
    by_sequence = [[int(step[k]) for step in ids] for k in range(len(ids[0]))]
    return marks[-1] - t0, marks[0] - t0, marks[-1] - marks[0], steps, by_sequence, cache


def run(args, report):
    """Fills report (status ok) or raises Failure."""
    try:
        import mlx.core as mx
        import mlx_lm
    except ImportError as e:
        raise Failure("setup", "mlx and mlx-lm are needed (pip install mlx mlx-lm): %s" % e)
    report["build"].update(mlx=mx.__version__, mlx_lm=getattr(mlx_lm, "__version__", None))
    if args.device == "gpu":
        if not gpu_available(mx):
            raise Failure("setup", "no GPU for MLX (mlx %s; --device cpu runs on the CPU)"
                          % mx.__version__)
        mx.set_default_device(mx.gpu)
    else:
        mx.set_default_device(mx.cpu)

    try:
        report["model"]["checkpoint"] = checkpoint_record(args.model)
    except OSError as e:
        raise Failure("setup", "model %s: %s" % (args.model, e))
    t_setup = time.perf_counter()
    try:
        mx, model, raw, dtype = load(args.model, args.dtype)
    except Exception as e:  # mlx-lm raises many kinds on a bad checkpoint
        raise Failure("setup", "model %s: %s: %s" % (args.model, type(e).__name__, e))
    proto = report["protocol"]
    batch = proto["batch"]
    try:
        prompts = resolve_prompts(proto, raw, args.prompt_from)
    except (ValueError, KeyError) as e:
        raise Failure("setup", str(e))
    ids = mx.array(prompts, dtype=mx.int32)
    mx.eval(ids)
    report["setup_seconds"] = time.perf_counter() - t_setup
    report["backend"] = "mlx-%s" % SHORT.get(dtype, dtype)
    report["peer"]["dtype"] = dtype
    mx.reset_peak_memory()

    runs, first, same, cache = [], None, True, None
    for i in range(args.warmup + args.iterations):
        try:
            total, prefill, decode, steps, gen, cache = execution(
                mx, model, ids, proto["gen_tokens"])
        except Exception as e:
            raise Failure("executions", "execution %d: %s: %s" % (i + 1, type(e).__name__, e))
        runs.append(execution_record(i >= args.warmup, total, prefill, decode, steps, batch))
        if first is None:
            first = gen
        same = same and gen == first
        print("mlx-baseline: %s %d: %.4f s" % ("warmup" if i < args.warmup else "execution",
                                               i + 1, total), file=sys.stderr)
    finish_executions(report, runs, first, same)
    tps = report["statistics"]["decode_tokens_per_second"]
    wbytes = decode_weight_bytes(model)
    weights = parameter_bytes(model)
    name, info = device_of(mx, args.device)
    report["environment"].update(
        threads=None,
        device={"name": name, "total_memory_bytes": info.get("memory_size")})
    report["peer"]["device_info"] = info
    report["model"].update(vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
                           layers=raw["num_hidden_layers"],
                           group_size=(raw.get("quantization") or {}).get("group_size"),
                           decode_weight_bytes_per_token=wbytes)
    report["weights"] = {"resident_bytes": weights, "streamed_bytes_per_decode_token": 0,
                         "streamed_bytes_per_decode_step": 0}
    report["memory"] = {"weights_resident": weights, "weights_slots": 0, "weights_offloaded": 0,
                        "kv_cache": sum(c.nbytes for c in cache), "activations": None,
                        "io": None, "workspace": None,
                        "device_in_use_bytes": mx.get_peak_memory()}
    report["bandwidth"] = {
        "decode_weight_bytes_per_token": wbytes, "achieved_bytes_per_second": wbytes * tps,
        "d2d": None, "read_kernel": None, "fraction_of_d2d": None,
        "note": "achieved = weight bytes per decode token x median decode tokens/s (MLX's "
                "bytes: the 4-bit words, scales and biases as loaded); no device copy "
                "ceiling measured"}
    report["status"] = "ok"


# ---- the command ------------------------------------------------------------


def parse_args(argv):
    """The options, after every usage check (argparse exits 2 on an error)."""
    ap = argparse.ArgumentParser(prog="mlx_baseline.py", description=__doc__.split("\n")[0])
    add_protocol_arguments(ap)
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                    help="MLX device (gpu: CUDA or Metal; cpu to test the script)")
    ap.add_argument("--dtype", choices=DTYPES, default="native",
                    help="activations: the checkpoint's (native, what mlx-lm runs) or the "
                         "model cast to this dtype (float32 to compare ids with the CPU "
                         "backend)")
    args = ap.parse_args(argv)
    check_protocol_arguments(ap, args)
    return args


def main(argv):
    args = parse_args(argv)
    try:
        protocol = protocol_of(args, EXECUTION)
    except Refused as e:
        print("mlx_baseline.py: error: %s" % e, file=sys.stderr)
        return 1
    report = new_report("mlx", "mlx", "mlx_baseline.py", args.device, args.model, protocol,
                        {"framework": "mlx-lm", "dtype": None,
                         "dtype_source": "checkpoint" if args.dtype == "native" else "--dtype",
                         "cache": "mlx_lm KVCache (make_prompt_cache)",
                         "generation": "generate_step's loop: the next pass queued before "
                                       "the ids are read", "device_info": None})
    try:
        run(args, report)
    except Failure as e:
        report["error"] = {"stage": e.stage, "message": str(e)}
        print("mlx_baseline.py: error: %s: %s" % (e.stage, e), file=sys.stderr)
    write_report(args.report, report)
    if report["status"] != "ok":
        print("report: %s (failed)" % args.report)
        return 1
    print_summary(report, "mlx %s on %s (mlx %s, mlx-lm %s)"
                  % (report["peer"]["dtype"], report["environment"]["device"]["name"],
                     report["build"]["mlx"], report["build"]["mlx_lm"]), d2d=False)
    print_deviations(report)
    print("report: %s" % args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
