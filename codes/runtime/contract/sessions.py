"""ONNX Runtime sessions, and the calling convention of a bidirectional backbone graph.

Torch-free: this is runtime code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

from codes.common.errors import GraphFailed, UserError
from codes.common.isa import FULL_RANGE, int8_weight_levels
from codes.runtime.contract import kernel_graphs, native_kernels
from codes.runtime.contract.int8_weights import reranged_weights
from codes.runtime.contract.probe import CAUSAL_ADVICE, probe_bidirectional

PROVIDERS = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}
ORT_TO_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def providers_for(provider: str) -> list[str]:
    if provider not in PROVIDERS:
        raise UserError(f"unknown provider {provider!r}; choose cpu or cuda")
    wanted = PROVIDERS[provider]
    if wanted[0] not in ort.get_available_providers():
        raise UserError(
            f"{wanted[0]} is not available in this onnxruntime build; install onnxruntime-gpu or use --provider cpu"
        )
    return wanted


def resolve_provider(requested: str | None, built_for: str | None) -> str:
    """cpu or cuda: what was asked, else what the build was made for (its manifest's execution provider),
    falling back to the CPU, with one line saying so, where this onnxruntime has no CUDA."""
    if requested is not None:
        return requested
    if built_for != PROVIDERS["cuda"][0]:
        return "cpu"
    if PROVIDERS["cuda"][0] in ort.get_available_providers():
        return "cuda"
    print("note: this build is made for CUDA, which this onnxruntime does not offer; running it on the CPU",
          file=sys.stderr)
    return "cpu"


def make_session(path: Path, provider: str = "cpu", threads: int | None = None,
                 profile_dir: Path | None = None, spin: bool = False) -> ort.InferenceSession:
    return open_session(path, providers_for(provider), threads, profile_dir, spin)


def backbone_session(path: Path, provider: str = "cpu", threads: int | None = None,
                     profile_dir: Path | None = None, precision: str | None = None,
                     head_dim: int | None = None) -> ort.InferenceSession:
    """A backbone graph's session: the one whose workers spin (see open_session). A build's own backbone names its
    precision and head size: a quantized one runs our kernels where this CPU has them (native_kernels.py)."""
    graph = None
    if precision is not None and head_dim is not None and provider == "cpu":
        if native_kernels.why_not(precision) is None:
            graph = kernel_graphs.fused_graph(Path(path), head_dim, native_kernels.lanes_here())
    return open_with_kernels(path, providers_for(provider), threads, profile_dir, spin=True, graph=graph)


def open_with_kernels(path: Path, providers: list[str] | None, threads: int | None, profile_dir: Path | None = None,
                      spin: bool = False, graph: bytes | Path | None = None) -> ort.InferenceSession:
    """open_session with our kernels' graph where there is one; where the library will not load here, the build's
    own graph on ONNX Runtime's ops, with a note."""
    if graph is not None:
        try:
            return open_session(path, providers, threads, profile_dir, spin, graph=graph)
        except UserError as exc:
            print(f"note: our CPU kernels did not load ({exc}); using ONNX Runtime's own ops", file=sys.stderr)
    return open_session(path, providers, threads, profile_dir, spin)


def open_session(path: Path, providers: list[str] | None = None, threads: int | None = None,
                 profile_dir: Path | None = None, spin: bool = False,
                 graph: bytes | Path | None = None) -> ort.InferenceSession:
    """threads None: ONNX Runtime's default, one intra-op thread per physical core.

    profile_dir: ONNX Runtime's profiler writes one JSON per session there (see end_profiling).
    spin: let the session's idle workers spin instead of sleeping while it runs, and stop when the run
        ends. Only the backbone does: every session has its own workers, and those of a short graph
        would go on spinning after it, taking the cores the backbone's next run needs; the backbone's
        would take the heads' (docs/DESIGN.md §spinning).
    graph: the graph at `path` as changed in memory (kernel_graphs.fused_graph), run with our kernels'
        library, its weights still read from path's folder; or a whole graph file our kernels run (a widened
        codec in the cache, kernel_graphs.codec_graph).
    """
    options = ort.SessionOptions()
    # fp16 graphs log a constant-folding warning per layer, and a failing kernel logs what its exception
    # says: run_cli reports that exception in one line.
    options.log_severity_level = 4
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    # A spinning session's workers stop when its run ends: spinning on, they took a core from the graph
    # that ran next (the heads ran at half speed after each backbone call).
    options.add_session_config_entry("session.force_spinning_stop", "1" if spin else "0")
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if profile_dir is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(profile_dir) / Path(path).stem)
    providers = providers or ["CPUExecutionProvider"]
    if isinstance(graph, bytes):
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(Path(path).parent))
    try:
        if graph is not None:
            options.register_custom_ops_library(str(native_kernels.LIBRARY))
        # int8 weights this CPU's kernels would saturate on, re-ranged (codes/runtime/contract/int8_weights.py);
        # the arrays must outlive the session, which holds them without a copy.
        overrides = fit_int8_weights(options, path) if providers[0] == "CPUExecutionProvider" else []
        source = str(graph) if isinstance(graph, Path) else graph if graph is not None else str(path)
        session = ort.InferenceSession(source, sess_options=options,
                                       providers=providers)
    except Exception as exc:  # ORT raises its own types for unreadable or invalid graphs
        raise UserError(f"ONNX Runtime cannot load {path}: {str(exc).splitlines()[0]}") from None
    session.reranged_int8 = overrides  # kept alive with the session; empty where the weights fit as built
    # whose ops run what our kernels can: ours, ours-avx2 (ONNX Runtime's attention) or onnx (native_kernels.py)
    session.kernels = native_kernels.kernels_label(native_kernels.lanes_here()) if graph is not None else "onnx"
    return session


def fit_int8_weights(options: ort.SessionOptions, path: Path, levels: int | None = None) -> list:
    """Hand `options` the int8 weights of the graph at `path` re-ranged to +-levels (None: what this CPU's
    kernels sum exactly; codes/runtime/contract/int8_weights.py); returns what the session must keep alive."""
    levels = int8_weight_levels() if levels is None else levels
    if levels >= FULL_RANGE:
        return []
    overrides = [(name, ort.OrtValue.ortvalue_from_numpy(array))
                 for name, array in reranged_weights(Path(path), levels).items()]
    for name, value in overrides:
        options.add_initializer(name, value)
    return overrides


def run_bound(session: ort.InferenceSession, inputs: dict, outputs: dict[str, str]) -> list[ort.OrtValue]:
    """Run `session` through I/O binding: inputs are numpy arrays (sent to the session's device) or
    OrtValues (used where they are); outputs maps each output's name to the device it is left on
    ("cpu" or "cuda"). Returns the outputs as OrtValues, in that order."""
    binding = session.io_binding()
    for name, value in inputs.items():
        if isinstance(value, ort.OrtValue):
            binding.bind_ortvalue_input(name, value)
        else:
            binding.bind_cpu_input(name, value)
    for name, device in outputs.items():
        binding.bind_output(name, device)
    try:
        session.run_with_iobinding(binding)
    except RuntimeError as exc:
        raise GraphFailed(str(exc)) from None
    return binding.get_outputs()


class BackboneRunner:
    """Call a backbone graph as hidden = f(inputs_embeds, 4-D bool mask [B,1,S,S]).

    Ours and the published bidirectional re-exports take that mask. A graph with a
    lower-rank mask (onnxruntime-genai's [B,S] key mask) is causal (docs/DESIGN.md
    §bidirectional), so it is refused here; only the checks probe such graphs.
    """

    signature = "mask4d"

    def __init__(self, session: ort.InferenceSession, name: str = "the backbone graph"):
        self.session = session
        inputs = {i.name: i for i in session.get_inputs()}
        if "inputs_embeds" not in inputs or "attention_mask" not in inputs:
            raise UserError(f"{name} has no inputs_embeds/attention_mask inputs; it is not an OmniVoice backbone")
        mask_rank = len(inputs["attention_mask"].shape)
        if mask_rank != 4:
            raise UserError(f"{name} takes a {mask_rank}-D attention mask, not OmniVoice's 4-D one [B,1,S,S], "
                            f"so it is causal: {CAUSAL_ADVICE}")
        self.embeds_dtype = ORT_TO_NUMPY[inputs["inputs_embeds"].type]
        self.hidden_size = inputs["inputs_embeds"].shape[-1]
        outputs = [o.name for o in session.get_outputs()]
        self.output_name = "hidden_states" if "hidden_states" in outputs else outputs[0]

    def __call__(self, inputs_embeds: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"inputs_embeds": inputs_embeds.astype(self.embeds_dtype, copy=False), "attention_mask": attention_mask}
        hidden = self.session.run([self.output_name], feed)[0]
        return hidden.astype(np.float32, copy=False)


def open_backbone(path: Path, provider: str = "cpu", threads: int | None = None, profile_dir: Path | None = None,
                  probe: bool = False, precision: str | None = None, head_dim: int | None = None) -> BackboneRunner:
    """The backbone graph at `path`, refused in one line if it is causal. `probe`: also run the
    bidirectionality probe (a few positions, milliseconds), for graphs no build of ours vouches for.
    precision, head_dim: a build's own backbone's (see backbone_session)."""
    if not Path(path).is_file():
        raise UserError(f"backbone graph {path} does not exist; pass an .onnx file with --backbone")
    runner = BackboneRunner(backbone_session(Path(path), provider, threads, profile_dir, precision, head_dim),
                            name=str(path))
    if probe and not probe_bidirectional(runner).bidirectional:
        raise UserError(f"{path} is causal: changing the last position leaves earlier ones unchanged; {CAUSAL_ADVICE}")
    return runner
