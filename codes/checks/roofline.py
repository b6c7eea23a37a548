"""bench/roofline.py: how far one decoding step is from what this CPU can do.

Two halves:
- the kernels: the rate ONNX Runtime's kernels reach here, each a one-node graph timed alone, at the
  step's own GEMM shapes (M tokens x K x N of q/k/v/o, gate/up and down, and the fused q/k/v and
  gate/up forms), at a large square shape, attention at the step's sequence lengths, and the
  memory bandwidth;
- the step: one decoding step of a build, through ONNX Runtime's profiler, its ops grouped into
  classes, with the work of each op read from the shapes the profiler records.

The roofline of an op is the larger of its work at the best rate any kernel reaches at its shape
(GEMMs and attention) and its bytes (weights, activations, output) at the measured bandwidth; the
step's roofline is the sum over its ops. The kernels are the ones this onnxruntime has: the ceiling is measured, not a
datasheet's.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from codes.runtime.contract import fused_attention, native_kernels

MS_DOMAIN = "com.microsoft"

# Op classes of the step: how an op's time is judged.
INT8_GEMM_OPS = {"DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulInteger", "DynamicQuantizeLinear"}
NBITS_GEMM_OPS = {"MatMulNBits"}
FLOAT_GEMM_OPS = {"MatMul", "FusedMatMul", "Gemm"}
ATTENTION_OPS = {"GroupQueryAttention", "MultiHeadAttention", "Attention", fused_attention.OP}
CLASSES = ("int8 GEMM", "n-bit GEMM", "fp32 GEMM", "attention", "the rest")  # n-bit: MatMulNBits
GEMM_CLASSES = CLASSES[:3]


def op_class(op: str) -> str:
    if op in INT8_GEMM_OPS:
        return "int8 GEMM"
    if op in NBITS_GEMM_OPS:
        return "n-bit GEMM"
    if op in FLOAT_GEMM_OPS:
        return "fp32 GEMM"
    if op in ATTENTION_OPS:
        return "attention"
    return "the rest"


# --- the work of an op, from the shapes the profiler records -----------------------------------------


def gemm_dims(input_shapes: list[list[int]], output_shape: list[int]) -> tuple[int, int, int]:
    """(M, K, N) of a MatMul-like op: A [.., M, K] times B, out [.., M, N]; M folds every leading axis."""
    a, out = input_shapes[0], output_shape
    k, n = a[-1], out[-1]
    return int(np.prod(out[:-1])), int(k), int(n)


def attention_macs(query: list[int], key: list[int], num_heads: int, head_dim: int) -> int:
    """Multiply-adds of softmax(QK^T)V for [B, S, heads*hd] queries over [B, T, ...] keys: QK^T and PV."""
    batch, queries, keys = query[0], query[1], key[1]
    return 2 * batch * num_heads * queries * keys * head_dim


# --- one-node graphs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """A kernel the step could use for a GEMM: its name, class and how to build it."""

    name: str
    cls: str
    build: Callable[[int, int, int], tuple[onnx.ModelProto, dict]]


def _model(nodes, inputs, outputs, initializers, opset_ms: bool = True) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "roofline", inputs, outputs, initializers)
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(MS_DOMAIN, 1)] if opset_ms else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _float_in(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _activations(m: int, k: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((m, k), dtype=np.float32)


def _int8_weights(k: int, n: int) -> np.ndarray:
    """7-bit weights: AVX2's u8 x s8 pairs (vpmaddubsw) saturate int16 with full-range ones; the timing is
    the same either way, and the products stay exact."""
    return np.random.default_rng(1).integers(-64, 64, (k, n), dtype=np.int8)


def dynamic_quantize_matmul(m: int, k: int, n: int):
    """fp32 activations quantized per call, int8 weights: what our cpu_int8 build runs."""
    inits = [numpy_helper.from_array(_int8_weights(k, n), "B"),
             numpy_helper.from_array(np.array(0.01, np.float32), "scale")]
    node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "scale"], ["Y"], domain=MS_DOMAIN)
    model = _model([node], [_float_in("A", [m, k])], [_float_in("Y", [m, n])], inits)
    return model, {"A": _activations(m, k)}


def matmul_integer(m: int, k: int, n: int):
    """u8 x s8 -> s32, the bare integer GEMM without quantizing or rescaling."""
    inits = [numpy_helper.from_array(_int8_weights(k, n), "B")]
    node = helper.make_node("MatMulInteger", ["A", "B"], ["Y"])
    a = helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k])
    y = helper.make_tensor_value_info("Y", TensorProto.INT32, [m, n])
    model = _model([node], [a], [y], inits, opset_ms=False)
    return model, {"A": np.random.default_rng(0).integers(0, 256, (m, k), dtype=np.uint8)}


def matmul_nbits(bits: int, accuracy_level: int, block_size: int = 32):
    def build(m: int, k: int, n: int):
        blocks = k // block_size
        packed = np.random.default_rng(2).integers(0, 256, (n, blocks, block_size * bits // 8), dtype=np.uint8)
        inits = [numpy_helper.from_array(packed, "B"),
                 numpy_helper.from_array(np.full(n * blocks, 0.01, np.float32), "scales")]
        node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain=MS_DOMAIN, K=k, N=n, bits=bits,
                                block_size=block_size, accuracy_level=accuracy_level)
        model = _model([node], [_float_in("A", [m, k])], [_float_in("Y", [m, n])], inits)
        return model, {"A": _activations(m, k)}
    return build


def matmul_fp32(m: int, k: int, n: int):
    inits = [numpy_helper.from_array(np.random.default_rng(3).standard_normal((k, n), dtype=np.float32), "B")]
    node = helper.make_node("MatMul", ["A", "B"], ["Y"])
    model = _model([node], [_float_in("A", [m, k])], [_float_in("Y", [m, n])], inits, opset_ms=False)
    return model, {"A": _activations(m, k)}


GEMM_KERNELS = (
    Kernel("DynamicQuantizeMatMul (u8 x s8)", "int8 GEMM", dynamic_quantize_matmul),
    Kernel("MatMulInteger (u8 x s8 -> s32)", "int8 GEMM", matmul_integer),
    Kernel("MatMulNBits int4, int8 compute", "n-bit GEMM", matmul_nbits(4, 4)),
    Kernel("MatMulNBits int8, int8 compute", "n-bit GEMM", matmul_nbits(8, 4)),
    Kernel("MatMul fp32", "fp32 GEMM", matmul_fp32),
)
INTEGER_KERNELS = tuple(kernel for kernel in GEMM_KERNELS if kernel.cls == "int8 GEMM")


def gqa_graph(seq: int, num_heads: int, kv_heads: int, head_dim: int, bias: bool, rotary: bool = True):
    """Bidirectional GroupQueryAttention over one sequence, as our backbone calls it: causal=0, no past,
    the rotary embedding applied inside (the genai builder's do_rotary)."""
    q, kv = num_heads * head_dim, kv_heads * head_dim
    inputs = [_float_in("q", [1, seq, q]), _float_in("k", [1, seq, kv]), _float_in("v", [1, seq, kv])]
    inits = [numpy_helper.from_array(np.array([seq - 1], np.int32), "seqlens_k"),
             numpy_helper.from_array(np.array(seq, np.int32), "total")]
    names = ["q", "k", "v", "", "", "seqlens_k", "total", "", "", "", ""]
    feeds = {n: np.random.default_rng(4).standard_normal((1, seq, q if n == "q" else kv), dtype=np.float32)
             for n in ("q", "k", "v")}
    if rotary:
        angles = np.outer(np.arange(seq), 1e6 ** (-np.arange(0, head_dim, 2) / head_dim)).astype(np.float32)
        inits += [numpy_helper.from_array(np.cos(angles), "cos"), numpy_helper.from_array(np.sin(angles), "sin")]
        names[7:9] = ["cos", "sin"]
    if bias:
        names[10] = "bias"
        inputs.append(_float_in("bias", [1, 1, seq, seq]))
        feeds["bias"] = np.zeros((1, 1, seq, seq), np.float32)
    node = helper.make_node("GroupQueryAttention", names, ["y", "present_k", "present_v"], domain=MS_DOMAIN,
                            num_heads=num_heads, kv_num_heads=kv_heads, causal=0, do_rotary=int(rotary))
    outputs = [_float_in("y", [1, seq, q]), _float_in("present_k", None), _float_in("present_v", None)]
    return _model([node], inputs, outputs, inits), feeds


def fused_graph(seq: int, num_heads: int, kv_heads: int, head_dim: int, bias: bool):
    """gqa_graph with the fused kernel in its place, as the runtime swaps it in (contract/fused_attention.py)."""
    model, feeds = gqa_graph(seq, num_heads, kv_heads, head_dim, bias)
    del model.graph.output[1:]  # the present key and value: read by nothing, and the kernel has none
    if not fused_attention.rewrite(model, head_dim):
        raise RuntimeError("the fused kernel's rewrite did not take GroupQueryAttention as the backbone calls it")
    return model, feeds


def mha_graph(seq: int, num_heads: int, kv_heads: int, head_dim: int, bias: bool):
    """MultiHeadAttention with the key/value heads repeated to the query heads (it has no grouping) and
    no rotary step (it would take a node of its own): a slightly generous ceiling."""
    q = num_heads * head_dim
    inputs = [_float_in("q", [1, seq, q]), _float_in("k", [1, seq, q]), _float_in("v", [1, seq, q])]
    feeds = {n: np.random.default_rng(5).standard_normal((1, seq, q), dtype=np.float32) for n in ("q", "k", "v")}
    names = ["q", "k", "v"]
    if bias:
        names += ["", "", "bias"]
        inputs.append(_float_in("bias", [1, 1, seq, seq]))
        feeds["bias"] = np.zeros((1, 1, seq, seq), np.float32)
    node = helper.make_node("MultiHeadAttention", names, ["y"], domain=MS_DOMAIN, num_heads=num_heads)
    return _model([node], inputs, [_float_in("y", [1, seq, q])], []), feeds


def int8_attention_graph(seq: int, num_heads: int, kv_heads: int, head_dim: int, bias: bool,
                         int8_values: bool = False):
    """Attention written out in ONNX ops with its products on the integer GEMMs: Q int8 a row (token and head),
    K smoothed by its mean over tokens (softmax does not change) and int8 a token, Q.K^T by MatMulInteger
    batched over the key heads (each holding its query heads' rows: no repeated keys), rescaled, the bias
    added, softmax; then P.V in fp32, or (int8_values) P in u8 a row and V smoothed and int8 a channel.
    No rotary step (GroupQueryAttention applies it inside). The form ONNX Runtime's CPU kernels offer for
    attention at the int8 rate, timed beside the fused fp32 kernels."""
    group, q_width, kv_width = num_heads // kv_heads, num_heads * head_dim, kv_heads * head_dim
    inits: list[TensorProto] = []

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    def row_quantize(x: str, axis: int, name: str, signed: bool = True) -> tuple[str, str]:
        """x's int8 (or u8 with zero point 128) values and its scale, one per slice along `axis`."""
        axes = const(f"{name}_axes", np.array([axis], np.int64))
        peak = node("Max", [node("ReduceMax", [x, axes], f"{name}_max", keepdims=1),
                            node("Neg", [node("ReduceMin", [x, axes], f"{name}_min", keepdims=1)], f"{name}_neg"),
                            const(f"{name}_floor", np.array(1e-12, np.float32))], f"{name}_peak")
        scale = node("Mul", [peak, const(f"{name}_inv127", np.array(1 / 127, np.float32))], f"{name}_scale")
        zero = const(f"{name}_zero", np.array(0, np.int8) if signed else np.array(128, np.uint8))
        return node("QuantizeLinear", [node("Div", [x, scale], f"{name}_scaled"), const(f"{name}_one", np.array(
            1.0, np.float32)), zero], f"{name}_q"), scale

    nodes: list = []
    shape = lambda name, dims: const(name, np.array(dims, np.int64))  # noqa: E731
    # q [1, S, H*D] -> [1, KV, group*S, D]; k [1, S, KV*D] -> [1, KV, D, S]; v -> [1, KV, S, D]
    q = node("Reshape", [node("Transpose", [node("Reshape", ["q", shape("q5", [1, seq, kv_heads, group, head_dim])],
                                                 "q_split")], "q_heads", perm=[0, 2, 3, 1, 4]),
                         shape("q4", [1, kv_heads, group * seq, head_dim])], "q_rows")
    k = node("Transpose", [node("Reshape", ["k", shape("k4", [1, seq, kv_heads, head_dim])], "k_split")], "k_t",
             perm=[0, 2, 3, 1])
    v = node("Transpose", [node("Reshape", ["v", shape("v4", [1, seq, kv_heads, head_dim])], "v_split")], "v_heads",
             perm=[0, 2, 1, 3])
    q_int, q_scale = row_quantize(q, -1, "q", signed=False)
    tokens = const("token_axis", np.array([-1], np.int64))
    k_smooth = node("Sub", [k, node("ReduceMean", [k, tokens], "k_mean", keepdims=1)], "k_smooth")
    k_int, k_scale = row_quantize(k_smooth, 2, "k")
    scores = node("Cast", [node("MatMulInteger", [q_int, k_int, const("q_zero", np.array(128, np.uint8))],
                                "scores_int")], "scores_float", to=TensorProto.FLOAT)
    row_scale = node("Mul", [q_scale, const("softmax_scale", np.array(1 / np.sqrt(head_dim), np.float32))], "row")
    scores = node("Mul", [node("Mul", [scores, row_scale], "scores_rows"), k_scale], "scores")
    inputs = [_float_in("q", [1, seq, q_width]), _float_in("k", [1, seq, kv_width]), _float_in("v", [1, seq, kv_width])]
    feeds = {n: np.random.default_rng(6).standard_normal((1, seq, q_width if n == "q" else kv_width), dtype=np.float32)
             for n in ("q", "k", "v")}
    if bias:
        grouped = node("Reshape", [scores, shape("s5", [1, kv_heads, group, seq, seq])], "scores_grouped")
        scores = node("Reshape", [node("Add", [grouped, "bias"], "scores_biased"),
                                  shape("s4", [1, kv_heads, group * seq, seq])], "scores_masked")
        inputs.append(_float_in("bias", [1, 1, 1, seq, seq]))
        feeds["bias"] = np.zeros((1, 1, 1, seq, seq), np.float32)
    probs = node("Softmax", [scores], "probs", axis=-1)
    if int8_values:
        p_peak = node("ReduceMax", [probs, tokens], "p_max", keepdims=1)
        p_scale = node("Mul", [p_peak, const("inv255", np.array(1 / 255, np.float32))], "p_scale")
        p_int = node("QuantizeLinear", [node("Div", [probs, p_scale], "p_scaled"), const("p_one", np.array(
            1.0, np.float32)), const("p_zero", np.array(0, np.uint8))], "p_q")
        v_mean = node("ReduceMean", [v, const("v_axis", np.array([2], np.int64))], "v_mean", keepdims=1)
        v_int, v_scale = row_quantize(node("Sub", [v, v_mean], "v_smooth"), 2, "v")
        out = node("Cast", [node("MatMulInteger", [p_int, v_int], "out_int")], "out_float", to=TensorProto.FLOAT)
        out = node("Add", [node("Mul", [node("Mul", [out, p_scale], "out_rows"), v_scale], "out_scaled"), v_mean], "out")
    else:
        out = node("MatMul", [probs, v], "out")
    out = node("Reshape", [node("Transpose", [node("Reshape", [out, shape("o5", [1, kv_heads, group, seq, head_dim])],
                                                   "out_split")], "out_tokens", perm=[0, 3, 1, 2, 4]),
                           shape("o3", [1, seq, q_width])], "y")
    return _model(nodes, inputs, [_float_in("y", [1, seq, q_width])], inits), feeds


def attention_kernels(num_heads: int, kv_heads: int, head_dim: int):
    def make(fn, bias, **kw):
        return lambda seq: fn(seq, num_heads, kv_heads, head_dim, bias, **kw)
    return (
        ("GroupQueryAttention + bias (ours)", make(gqa_graph, True)),
        ("GroupQueryAttention, no bias", make(gqa_graph, False)),
        ("MultiHeadAttention + bias, no rotary", make(mha_graph, True)),
        ("MultiHeadAttention, no bias, no rotary", make(mha_graph, False)),
        ("int8 Q·Kᵀ, fp32 P·V, ops + bias, no rotary", make(int8_attention_graph, True)),
        ("int8 Q·Kᵀ and P·V, ops + bias, no rotary", make(int8_attention_graph, True, int8_values=True)),
    ) + ((("fused kernel + bias (ours: int8 Q·Kᵀ, bf16 P·V)", make(fused_graph, True)),)
         if native_kernels.why_not("int8") is None else ())


# --- timing --------------------------------------------------------------------------------------------


def session_for(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    if any(opset.domain == native_kernels.DOMAIN for opset in model.opset_import):
        options.register_custom_ops_library(str(native_kernels.LIBRARY))
    return ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])


def best_seconds(run: Callable[[], object], min_seconds: float, min_runs: int = 3) -> float:
    """The fastest of repeated runs after one warm-up: a kernel's peak, not its average on a busy host."""
    run()
    best, spent, runs = float("inf"), 0.0, 0
    while runs < min_runs or spent < min_seconds:
        start = time.perf_counter()
        run()
        took = time.perf_counter() - start
        best, spent, runs = min(best, took), spent + took, runs + 1
    return best


def time_graph(model: onnx.ModelProto, feeds: dict, threads: int, min_seconds: float) -> float | None:
    """Seconds of one run, or None where this onnxruntime has no such kernel here."""
    try:
        session = session_for(model, threads)
        return best_seconds(lambda: session.run(None, feeds), min_seconds)
    except Exception:  # ORT's own error types: "not implemented" is a result, not a failure
        return None


def gemm_rates(shapes: Iterable[tuple[int, int, int]], threads: int, min_seconds: float,
               kernels: tuple[Kernel, ...] = GEMM_KERNELS, log=print) -> list[dict]:
    """GMAC/s of each kernel at each (M, K, N); None where a kernel does not run here."""
    rows = []
    for m, k, n in shapes:
        for kernel in kernels:
            model, feeds = kernel.build(m, k, n)
            seconds = time_graph(model, feeds, threads, min_seconds)
            rate = m * k * n / seconds / 1e9 if seconds else None
            rows.append({"kernel": kernel.name, "class": kernel.cls, "m": m, "k": k, "n": n, "seconds": seconds,
                         "gmacs": rate})
            log(f"  {kernel.name:34s} M={m:5d} K={k:5d} N={n:5d}: " + (f"{rate:7.1f} GMAC/s" if rate else "n/a"))
    return rows


def attention_rates(seqs: Iterable[int], num_heads: int, kv_heads: int, head_dim: int, threads: int,
                    min_seconds: float, log=print) -> list[dict]:
    rows = []
    for seq in seqs:
        macs = attention_macs([1, seq], [1, seq], num_heads, head_dim)
        for name, build in attention_kernels(num_heads, kv_heads, head_dim):
            model, feeds = build(seq)
            seconds = time_graph(model, feeds, threads, min_seconds)
            rate = macs / seconds / 1e9 if seconds else None
            rows.append({"kernel": name, "seq": seq, "seconds": seconds, "gmacs": rate})
            log(f"  {name:34s} S={seq:5d}: " + (f"{rate:7.1f} GMAC/s" if rate else "n/a"))
    return rows


def bandwidth_gbs(threads: int, megabytes: int = 512, min_seconds: float = 1.0) -> float:
    """Memory bandwidth, GB/s: a threaded elementwise Add over arrays far past any cache, bytes read
    plus bytes written."""
    count = megabytes * 2**20 // 4
    node = helper.make_node("Add", ["X", "Y"], ["Z"])
    model = _model([node], [_float_in("X", [count]), _float_in("Y", [count])], [_float_in("Z", [count])], [],
                   opset_ms=False)
    x = np.ones(count, np.float32)
    session = session_for(model, threads)
    seconds = best_seconds(lambda: session.run(None, {"X": x, "Y": x}), min_seconds)
    return 3 * count * 4 / seconds / 1e9


# --- the step ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpRun:
    """One op of one step as the profiler saw it."""

    graph: str
    name: str
    op: str
    seconds: float
    input_shapes: list[list[int]]
    output_shapes: list[list[int]]
    data_bytes: int  # activations in and out
    parameter_bytes: int  # initializers: a GEMM's weights, but also tables only some rows of are read

    @property
    def cls(self) -> str:
        return op_class(self.op)

    @property
    def bytes(self) -> int:
        """What the op must move at least: its data, and the whole of its parameters only where it reads
        them all (a GEMM's weights; not a lookup table, nor GQA's rotary caches)."""
        return self.data_bytes + (self.parameter_bytes if self.is_gemm else 0)

    @property
    def is_gemm(self) -> bool:
        """A matrix product (the activations' quantizers in a GEMM class are not)."""
        return self.cls in GEMM_CLASSES and self.op != "DynamicQuantizeLinear"


def _shapes(entries) -> list[list[int]]:
    return [list(next(iter(entry.values()))) for entry in entries or []]


def fastest_step(events: list[dict], graph: str, steps: int) -> list[OpRun]:
    """One step of one session's profile, each op at its fastest over the `steps` steps after the first
    (which allocates): the same best-of-runs the kernels get, so a busy spell of the host does not count
    against the step. A graph may run more than once a step (the backbone: conditional and unconditional
    rows); each run's ops are kept apart."""
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    per_step = len(runs) // (steps + 1)
    best: dict[tuple[int, str], OpRun] = {}
    for e in events:
        if not per_step or e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        run = bisect.bisect_right(runs, e["ts"]) - 1
        if run < per_step:
            continue
        args = e["args"]
        op = OpRun(graph, e["name"].removesuffix("_kernel_time"), args["op_name"], e["dur"] / 1e6,
                   _shapes(args.get("input_type_shape")), _shapes(args.get("output_type_shape")),
                   int(args.get("activation_size", 0)) + int(args.get("output_size", 0)),
                   int(args.get("parameter_size", 0)))
        key = (run % per_step, op.name)
        if key not in best or op.seconds < best[key].seconds:
            best[key] = op
    return list(best.values())


def step_ops(model_dir: Path, case, threads: int, steps: int = 3) -> list[OpRun]:
    """The ops of one decoding step of `case` (a workloads.Case; each op at its fastest of `steps`)."""
    from codes.checks.profiling import profiled_events

    return [op for graph, events in profiled_events(model_dir, case, threads, steps).items()
            for op in fastest_step(events, graph, steps)]


def step_tokens(ops: list[OpRun]) -> int:
    """The rows the backbone runs in a step: every attention node sees each of them once as a query."""
    attention = [op for op in ops if op.cls == "attention"]
    layers = len({op.name for op in attention})
    return round(sum(op.input_shapes[0][0] * op.input_shapes[0][1] for op in attention) / layers) if layers else 0


@dataclass(frozen=True)
class Peaks:
    """The measured ceilings: best GMAC/s per (class, M, K, N) and per attention length, and bandwidth."""

    gemm: list[dict]
    attention: list[dict]
    bandwidth_gbs: float

    def gemm_peak(self, m: int, k: int, n: int, classes: tuple[str, ...]) -> float | None:
        """The best rate of any kernel of `classes` at (K, N), at the measured M nearest to m."""
        rows = [r for r in self.gemm if r["k"] == k and r["n"] == n and r["class"] in classes]
        return _best_nearest(rows, "m", m)

    def attention_peak(self, seq: int) -> float | None:
        return _best_nearest(self.attention, "seq", seq)


def _best_nearest(rows: list[dict], key: str, value: int) -> float | None:
    """The best measured rate among `rows` at the measured `key` nearest to `value` (None: none ran)."""
    rows = [r for r in rows if r["gmacs"]]
    if not rows:
        return None
    nearest = min({r[key] for r in rows}, key=lambda x: abs(x - value))
    return max(r["gmacs"] for r in rows if r[key] == nearest)


# GEMMs of any integer kernel are held to the best integer rate: the class a build uses is its choice.
INTEGER = ("int8 GEMM", "n-bit GEMM")
FLOAT = ("fp32 GEMM",)


def attention_lengths(op: OpRun) -> tuple[int, int, int]:
    """(batch, queries, keys) of an attention op; our kernel's packed form has no key input, and its keys are
    its queries (contract/fused_attention.py's pack)."""
    query, key = op.input_shapes[0], op.input_shapes[1] if len(op.input_shapes) > 1 else []
    return query[0], query[1], key[1] if len(key) == 3 else query[1]


def op_work(op: OpRun, num_heads: int, head_dim: int) -> tuple[str, float]:
    """("GMAC", work) for GEMMs and attention, ("GB", bytes) for the rest."""
    if op.is_gemm:
        m, k, n = gemm_dims(op.input_shapes, op.output_shapes[0])
        return "GMAC", m * k * n / 1e9
    if op.cls == "attention":
        batch, queries, keys = attention_lengths(op)
        return "GMAC", attention_macs([batch, queries], [batch, keys], num_heads, head_dim) / 1e9
    return "GB", op.bytes / 1e9


def op_floor(op: OpRun, peaks: Peaks, num_heads: int, head_dim: int) -> float | None:
    """Seconds of the op at the measured ceiling (None where no kernel at its shape was measured)."""
    unit, work = op_work(op, num_heads, head_dim)
    moving = op.bytes / 1e9 / peaks.bandwidth_gbs  # the memory roof: its weights and activations once
    if unit == "GB":
        return moving
    if op.cls == "attention":
        rate = peaks.attention_peak(op.input_shapes[0][1])
    else:
        m, k, n = gemm_dims(op.input_shapes, op.output_shapes[0])
        rate = peaks.gemm_peak(m, k, n, INTEGER if op.cls != "fp32 GEMM" else FLOAT)
    return max(work / rate, moving) if rate else None


def class_table(ops: list[OpRun], peaks: Peaks, num_heads: int, head_dim: int) -> list[dict]:
    """Per op class of one step (its ops): seconds, work, achieved rate, the ceiling's rate and seconds."""
    rows = []
    for cls in CLASSES:
        members = [op for op in ops if op.cls == cls]
        if not members:
            continue
        seconds = sum(op.seconds for op in members)
        works = [op_work(op, num_heads, head_dim) for op in members]
        # A GEMM class's work is its multiply-adds; the activations' quantizers in it count in time only.
        unit = "GMAC" if any(u == "GMAC" for u, _ in works) else "GB"
        work = sum(w for u, w in works if u == unit)
        floors = [op_floor(op, peaks, num_heads, head_dim) for op in members]
        floor = sum(f for f in floors if f is not None)
        rows.append({"class": cls, "seconds": seconds, "unit": unit, "work": work,
                     "achieved": work / seconds if seconds else None, "floor_seconds": floor,
                     "peak": work / floor if floor else None, "unmeasured": sum(f is None for f in floors)})
    return rows


# --- the yardstick: the step against the ISA, not against our own kernels ---------------------------------


def attention_gemms(op: OpRun, num_heads: int, head_dim: int) -> list[tuple[int, int, int, int]]:
    """Attention's two products as GEMMs: (count, M, K, N) of Q.K^T ([S, D] x [D, T] a head and sequence) and
    P.V ([S, T] x [T, D])."""
    batch, queries, keys = attention_lengths(op)
    return [(batch * num_heads, queries, head_dim, keys), (batch * num_heads, queries, keys, head_dim)]


def layer_activation_floats(dims: dict, intermediate: int) -> int:
    """Floats a token's layer must write once (and read once): its input, q/k/v, attention's output, the MLP's
    intermediate and its output."""
    q, kv = dims["num_attention_heads"] * dims["head_dim"], dims["num_key_value_heads"] * dims["head_dim"]
    return dims["hidden_size"] + (q + 2 * kv) + q + intermediate + dims["hidden_size"]


def isa_table(ops: list[OpRun], peaks: Peaks, dims: dict, intermediate: int, backbone: str) -> list[dict]:
    """Per op class of one step: its seconds against the ISA's yardstick. Every GEMM-shaped multiply-add of the
    backbone (its linear layers, outlier channels included, and attention's Q.K^T and P.V) at the best integer
    rate measured at its shape; the other graphs' GEMMs (the heads) at the best fp32 rate; memory at the
    measured bandwidth, for the weights once and one write and one read of each activation the layer's maths
    needs (layer_activation_floats), charged to the rest."""
    heads, head_dim = dims["num_attention_heads"], dims["head_dim"]

    def gemm_seconds(m: int, k: int, n: int, classes) -> float | None:
        rate = peaks.gemm_peak(m, k, n, classes)
        return m * k * n / 1e9 / rate if rate else None

    rows, tokens = [], step_tokens(ops)
    for cls in CLASSES:
        members = [op for op in ops if op.cls == cls]
        if not members:
            continue
        floor, unmeasured = 0.0, 0
        for op in members:
            if op.is_gemm:
                classes = INTEGER if op.graph == backbone else FLOAT
                seconds = gemm_seconds(*gemm_dims(op.input_shapes, op.output_shapes[0]), classes)
                seconds = None if seconds is None else max(seconds, op.parameter_bytes / 1e9 / peaks.bandwidth_gbs)
            elif cls == "attention":
                parts = [(count, gemm_seconds(m, k, n, INTEGER)) for count, m, k, n in attention_gemms(op, heads, head_dim)]
                seconds = None if any(s is None for _, s in parts) else sum(count * s for count, s in parts)
            else:
                continue  # the rest: what it must move, below
            if seconds is None:
                unmeasured += 1
            else:
                floor += seconds
        if cls == "the rest":
            moved = 2 * 4 * layer_activation_floats(dims, intermediate) * dims["num_hidden_layers"] * tokens
            floor = moved / 1e9 / peaks.bandwidth_gbs
        rows.append({"class": cls, "seconds": sum(op.seconds for op in members), "isa_seconds": floor,
                     "unmeasured": unmeasured})
    return rows
