"""Upstream OmniVoice's Python API over an omnivoice-onnx build: the same names, arguments, defaults and
return types, with ONNX Runtime and numpy underneath. No torch.

Code written for upstream runs with the import and the model path changed:

    from codes import OmniVoice, OmniVoiceGenerationConfig, VoiceClonePrompt   # was: from omnivoice import ...
    model = OmniVoice.from_pretrained("models/omnivoice-cpu")                  # was: "k2-fsa/OmniVoice"
    audio = model.generate(text="Hello there.", language="en")                  # a list of float32 arrays, 24 kHz

Synthesis itself is OmniVoiceOnnx's (codes/runtime/synthesis.py); this module only translates.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.common.fileio import atomic_path
from codes.runtime.contract.settings import ALIASES, GenerationSettings
from codes.runtime.contract.specs import SAMPLE_RATE
from codes.runtime.request import Voice
from codes.runtime.synthesis import OmniVoiceOnnx
from codes.runtime.text.voice_design import LANGUAGE_IDS, LANGUAGE_NAMES

logger = logging.getLogger(__name__)

_DEFAULTS = GenerationSettings()
_OURS = dict(ALIASES)  # upstream's field name -> ours, where they differ (num_step -> num_steps)


@dataclass
class OmniVoiceGenerationConfig:
    """Upstream's generation settings by upstream's names; the defaults are GenerationSettings'."""

    num_step: int = _DEFAULTS.num_steps
    guidance_scale: float = _DEFAULTS.guidance_scale
    t_shift: float = _DEFAULTS.t_shift
    layer_penalty_factor: float = _DEFAULTS.layer_penalty_factor
    position_temperature: float = _DEFAULTS.position_temperature
    class_temperature: float = _DEFAULTS.class_temperature
    denoise: bool = _DEFAULTS.denoise
    preprocess_prompt: bool = _DEFAULTS.preprocess_prompt
    postprocess_output: bool = _DEFAULTS.postprocess_output
    audio_chunk_duration: float = _DEFAULTS.audio_chunk_duration
    audio_chunk_threshold: float = _DEFAULTS.audio_chunk_threshold
    pad_duration: float = _DEFAULTS.pad_duration
    fade_duration: float = _DEFAULTS.fade_duration

    @classmethod
    def from_dict(cls, kwargs_dict: dict) -> OmniVoiceGenerationConfig:
        """As upstream: the keys that are fields, the rest left out."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in kwargs_dict.items() if key in names})

    def settings(self) -> GenerationSettings:
        """Ours, validated: a bad value is a one-line UserError naming it."""
        return GenerationSettings().replace(**{_OURS.get(f.name, f.name): getattr(self, f.name)
                                               for f in dataclasses.fields(self)})


@dataclass
class VoiceClonePrompt:
    """Upstream's reusable clone prompt: the reference's codes [8, T] (int64 numpy, where upstream holds a
    torch tensor), its transcript and its RMS. save/load read and write upstream's .pt, without torch."""

    ref_audio_tokens: np.ndarray
    ref_text: str
    ref_rms: float | None

    def save(self, path: str | Path) -> None:
        """Upstream's file (torch.load and upstream's VoiceClonePrompt.load read it), written whole or not at all."""
        voice = self._voice()
        with atomic_path(Path(path)) as tmp:
            tmp.write_bytes(voice.to_bytes("pt"))

    @classmethod
    def load(cls, path: str | Path, map_location: str = "cpu") -> VoiceClonePrompt:
        """A prompt upstream saved (also our .npz voices and wyoming-piper's ref.rvq). map_location is
        accepted for upstream's signature: the codes are on the host until a step uses them."""
        return cls.from_voice(Voice.load(path))

    @classmethod
    def from_voice(cls, voice: Voice) -> VoiceClonePrompt:
        return cls(voice.codes, voice.text, voice.rms)

    def _voice(self) -> Voice:
        from codes.runtime.voices.prompt import check_ref_codes

        return Voice(check_ref_codes(_to_numpy(self.ref_audio_tokens)), self.ref_text,
                     None if self.ref_rms is None else float(self.ref_rms))


# Hugging Face from_pretrained arguments that choose nothing here: the graphs, their precision and the
# attention were fixed when the build was made.
_NO_EFFECT = {"attn_implementation", "low_cpu_mem_usage", "trust_remote_code", "revision", "cache_dir",
              "local_files_only", "force_download", "token", "use_safetensors", "variant", "subfolder",
              "train"}


class OmniVoice:
    """Upstream's OmniVoice model class, over a build folder. `engine` is the OmniVoiceOnnx underneath
    (our extras: seeds, codes, streaming)."""

    def __init__(self, engine: OmniVoiceOnnx):
        self.engine = engine
        self.sampling_rate = SAMPLE_RATE

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, device_map=None, dtype=None, torch_dtype=None,
                        load_asr: bool = False, asr_model_name: str | None = None, asr_device=None, higgs_dir=None,
                        asr_dir=None, threads: int | None = None, **kwargs) -> OmniVoice:
        """A build folder from optimize.py (the model path upstream takes is a checkpoint: build it first).

        device_map: "cpu", "cuda"/"cuda:0", "auto" or None (the build's own provider). dtype: only what
        the build holds ("auto", or its precision). Upstream's loading arguments that choose nothing
        here are accepted; an argument neither upstream nor we know is a warning, as it would be ignored.
        The recogniser (a clip without ref_text) is the one the build holds (optimize.py --include-asr), or
        asr_dir's: load_asr loads it now rather than on first use, asr_model_name must name the model it was
        built from, asr_device is where it runs (as device_map). Ours: higgs_dir (a codec elsewhere), asr_dir
        (a recogniser elsewhere), threads (ONNX Runtime's intra-op threads)."""
        if args:
            raise UserError(f"from_pretrained takes the model path and keyword arguments, got {len(args)} more "
                            "positional argument(s)")
        folder = Path(pretrained_model_name_or_path)
        if (folder / "config.json").is_file() and not (folder / "omnivoice_manifest.json").is_file():
            raise UserError(f"{folder} is an upstream checkpoint; build it first with "
                            f"python optimize.py --model {folder} --output models/omnivoice-cpu, and load that folder")
        unknown = sorted(set(kwargs) - _NO_EFFECT)
        if unknown:
            logger.warning("from_pretrained: ignored argument(s) %s", ", ".join(unknown))
        engine = OmniVoiceOnnx(folder, higgs_dir=higgs_dir, provider=_provider(device_map), threads=threads,
                               asr_dir=asr_dir, asr_provider=_provider(asr_device))
        _check_dtype(dtype if dtype is not None else torch_dtype, engine)
        model = cls(engine)
        if asr_model_name is not None and engine.has_recogniser:
            _check_asr_model(asr_model_name, engine)
        if load_asr:
            model.load_asr_model(asr_model_name)
        return model

    def load_asr_model(self, model_name: str | None = None, device=None) -> None:
        """Load the build's recogniser now (it otherwise loads on first use). model_name must be the Whisper it
        was built from; device, where it runs, counts only before it is loaded."""
        engine = self.engine
        if not engine.has_recogniser:
            raise UserError(f"{engine.manifest.folder} has no recogniser to load: build one with `python optimize.py "
                            "--include-asr` (or pass asr_dir=), or give each clip its transcript (ref_text)")
        if model_name is not None:
            _check_asr_model(model_name, engine)
        engine.load_recogniser(_provider(device))

    def transcribe(self, audio) -> str:
        """Upstream's transcribe: a file path or (waveform, sample_rate), as it is (no preparation), to text."""
        from codes.runtime.audio.processing import read_audio

        wav, rate = read_audio(audio) if isinstance(audio, (str, Path)) else _clip(audio)
        return self.engine.load_recogniser().transcribe(wav, rate)

    def supported_language_ids(self) -> set[str]:
        return set(LANGUAGE_IDS)

    def supported_language_names(self) -> set[str]:
        return set(LANGUAGE_NAMES)

    def create_voice_clone_prompt(self, ref_audio, ref_text: str | None = None,
                                  preprocess_prompt: bool = True) -> VoiceClonePrompt:
        """ref_audio: a file path or a (waveform, sample_rate) tuple, the waveform [samples] or
        [channels, samples] (numpy, or a torch tensor where torch is installed)."""
        return VoiceClonePrompt.from_voice(self.engine.create_voice(_clip(ref_audio), ref_text, preprocess_prompt))

    def generate(self, text, language=None, ref_text=None, ref_audio=None, voice_clone_prompt=None, instruct=None,
                 duration=None, speed=None, generation_config: OmniVoiceGenerationConfig | None = None,
                 normalize_text: bool = False, **kwargs) -> list[np.ndarray]:
        """Speech for each text: a list of 1-D float32 arrays at 24 kHz, one per text, always a list.

        Every argument may be a list, one item per text, ref_audio and voice_clone_prompt too, so one
        call clones several voices. voice_clone_prompt wins over ref_audio. kwargs: the config's fields
        (used only without generation_config, as upstream), and ours: seed (item i draws its noise from
        seed + i)."""
        seed = kwargs.pop("seed", None)
        if generation_config is None:
            generation_config = OmniVoiceGenerationConfig.from_dict(kwargs)
            unknown = sorted(set(kwargs) - {f.name for f in dataclasses.fields(OmniVoiceGenerationConfig)})
            if unknown:
                logger.warning("generate: ignored argument(s) %s (not generation settings)", ", ".join(unknown))
        settings = generation_config.settings()
        if voice_clone_prompt is not None:
            if ref_audio is not None or ref_text is not None:
                logger.warning("both voice_clone_prompt and ref_text/ref_audio are given; ref_text/ref_audio are ignored")
            voices = ([None if p is None else p._voice() for p in voice_clone_prompt]
                      if isinstance(voice_clone_prompt, list) else voice_clone_prompt._voice())
        elif ref_audio is not None:
            clips = [None if c is None else _clip(c) for c in ref_audio] if isinstance(ref_audio, list) else _clip(ref_audio)
            voices = self.engine.create_voices(clips, ref_text, settings.preprocess_prompt)
        else:
            voices = None
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, list):
            raise UserError(f"text must be a string or a list of strings, got {type(text).__name__}")
        return self.engine.generate(texts, language=language, instruct=instruct, voice=voices, duration=duration,
                                    speed=speed, seed=seed, normalize_text=normalize_text, settings=settings)


def _to_numpy(values) -> np.ndarray:
    """A numpy array from numpy or, where the caller has torch, a tensor (torch is never imported here)."""
    if type(values).__module__.split(".")[0] == "torch":
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def _clip(ref_audio):
    """A clip as the engine takes it: a path, or (waveform as numpy, sample_rate)."""
    if isinstance(ref_audio, (str, Path)):
        return ref_audio
    if isinstance(ref_audio, tuple) and len(ref_audio) == 2:
        waveform, sample_rate = ref_audio
        return _to_numpy(waveform).astype(np.float32, copy=False), int(sample_rate)
    raise UserError(f"ref_audio must be a file path or a (waveform, sample_rate) tuple, got {type(ref_audio).__name__}")


def _check_asr_model(name: str, engine: OmniVoiceOnnx) -> None:
    """asr_model_name names the model the recogniser was built from (its hub id or name, or its folder)."""
    from codes.runtime.recognition.asr import read_asr_manifest

    folder = engine.recogniser_dir()
    source = read_asr_manifest(folder)["source"]
    built_from = source.get("asr_model")
    if name == built_from or (source.get("path") and Path(name).resolve() == Path(source["path"]).resolve()):
        return
    raise UserError(f"asr_model_name {name!r}: the recogniser in {folder} was built from {built_from!r}; build that "
                    f"model's with `python optimize.py --include-asr --asr-model {name}`, or leave asr_model_name out")


def _provider(device_map) -> str | None:
    """The execution provider a device_map asks for; None follows the build."""
    if device_map is None:
        return None
    name = str(device_map).lower()  # a torch.device prints as "cuda:0"
    if name == "auto":
        return None
    if name == "cpu":
        return "cpu"
    if name in ("cuda", "cuda:0"):
        return "cuda"
    raise UserError(f"device_map {device_map!r} is not one this runtime can run on; use 'cpu', 'cuda' "
                    "(the first GPU; set CUDA_VISIBLE_DEVICES to choose another) or 'auto'")


_DTYPE_PRECISIONS = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}


def _check_dtype(dtype, engine: OmniVoiceOnnx) -> None:
    """A dtype is accepted when it names the build's backbone precision (or "auto"): a build's precision
    was chosen by optimize.py's profile and cannot change at load time."""
    if dtype is None:
        return
    name = str(dtype).removeprefix("torch.").lower()
    if name == "auto":
        return
    built = engine.manifest.graph_precision.get("llm", "?")
    if _DTYPE_PRECISIONS.get(name) == built:
        return
    raise UserError(f"dtype {name} asks for a {_DTYPE_PRECISIONS.get(name, name)} backbone, but "
                    f"{engine.manifest.folder} holds a {built} one; leave dtype out, or build the precision you "
                    "want with optimize.py --device (cpu_fp32, cpu_int8, gpu, ...)")
