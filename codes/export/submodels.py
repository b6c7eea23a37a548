"""The sub-model registry: one entry per graph, binding its spec to the torch module it is exported from.

An entry knows its spec (inputs, outputs, dynamic axes: codes/runtime/contract/specs.py), its part in a
profile's precision recipe, and the torch module class whose `load(source)` and
`example_inputs(source)` give the model and its export-time inputs. Olive reaches the same
entries through user_script.py by the names `olive_names` gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codes.export import higgs, scoring, wrappers
from codes.runtime.contract import specs


@dataclass(frozen=True)
class SubModel:
    spec: specs.SubModelSpec
    part: str  # its entry in a profile's precision recipe: embeddings | llm | heads | scoring | codec
    module: type  # a torch module class with load(source) and example_inputs(source)

    @property
    def key(self) -> str:
        return self.spec.key

    def export_spec(self, source: Path) -> specs.SubModelSpec:
        """The spec as exported from `source`: backbone graphs get the checkpoint's width."""
        if self.part in ("embeddings", "llm", "heads"):
            return self.spec.sized(wrappers.hidden_size(source))
        return self.spec

    @property
    def olive_names(self) -> tuple[str, str]:
        """The model loader and dummy-inputs function names Olive asks user_script.py for."""
        return f"load_{self.key}", f"{self.key}_inputs"


BACKBONE_GRAPHS = (
    SubModel(specs.EMBEDDINGS, "embeddings", wrappers.AudioEmbeddingsEncoder),
    SubModel(specs.BACKBONE, "llm", wrappers.LlmBackbone),
    SubModel(specs.HEADS, "heads", wrappers.AudioHeadsDecoder),
)
SCORING_GRAPHS = (
    SubModel(specs.SCORING, "scoring", scoring.CellScoring),
    SubModel(specs.SCORING_SAMPLED, "scoring", scoring.SampledCellScoring),
)
CODEC_GRAPHS = (
    SubModel(specs.ACOUSTIC_ENCODER, "codec", higgs.AcousticEncoder),
    SubModel(specs.SEMANTIC_ENCODER, "codec", higgs.SemanticEncoder),
    SubModel(specs.QUANTIZER_ENCODER, "codec", higgs.QuantizerEncoder),
    SubModel(specs.HIGGS_DECODER, "codec", higgs.HiggsDecoder),
)
SUBMODELS = {entry.key: entry for entry in (*BACKBONE_GRAPHS, *SCORING_GRAPHS, *CODEC_GRAPHS)}


def olive_entry_point(name: str):
    """The function Olive calls for `load_<key>` (with the source folder) or `<key>_inputs` (with its
    model handler). Olive calls only plain functions, so each is a def, not a partial."""
    for entry in SUBMODELS.values():
        loader, inputs = entry.olive_names
        if name == loader:
            def load(model_path, _entry=entry):
                return _entry.module.load(Path(model_path))

            return load
        if name == inputs:
            def example_inputs(handler, _entry=entry):
                return _entry.module.example_inputs(Path(handler.model_path))

            return example_inputs
    raise AttributeError(name)
