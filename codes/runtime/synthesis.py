"""OmniVoiceOnnx: upstream's whole generation contract over ONNX Runtime and numpy. No torch.

    tts = OmniVoiceOnnx("models/omnivoice-cpu")
    audio = tts.generate("Hello there.", language="en")      # float32, 24 kHz
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.runtime.audio import processing as audio_ops
from codes.runtime.contract import specs
from codes.runtime.contract.manifest import build_key, read_manifest, recogniser_folder
from codes.runtime.contract.probe import CAUSAL_ADVICE
from codes.runtime.contract.sessions import make_session, open_backbone, providers_for, resolve_provider, run_bound
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.contract.specs import AUDIO_VOCAB_SIZE, NUM_CODEBOOKS, SAMPLE_RATE
from codes.runtime.model.decoding import NoiseSource, ScoreFn, iterative_decode, numpy_scores, per_item
from codes.runtime.model.forward import StepForward, timed
from codes.runtime.recognition.asr import NO_ALIGNMENT, read_asr_manifest
from codes.runtime.request import (NO_RECOGNISER, DecodingPlan, Request, Voice, first_chunk_voice,
                                   needs_transcript, one_per_text, plan_decoding, settle)
from codes.runtime.text.cleanup import add_punctuation
from codes.runtime.text.normalize import without_tags
from codes.runtime.text.tokenizer import TextTokenizer
from codes.runtime.text.voice_design import resolve_language
from codes.runtime.voices.prompt import CfgBatch, prompt_batch

logger = logging.getLogger(__name__)

STEPS = ("device", "graph", "numpy")
# The step each provider runs unless told: measured side by side in bench/step_results.md (docs/DESIGN.md
# §step-on-device). On the CPU every tensor is on the host anyway, and numpy's maths on the cells it
# needs costs least; on CUDA the step stays on the device.
DEFAULT_STEP = {"cpu": "numpy", "cuda": "device"}


class OmniVoiceOnnx:
    def __init__(self, model_dir: str | Path, higgs_dir: str | Path | None = None, provider: str | None = None,
                 threads: int | None = None, profile_dir: Path | None = None, backbone: str | Path | None = None,
                 step: str | None = None, asr_dir: str | Path | None = None, asr_provider: str | None = None):
        """provider: cpu or cuda; None follows the build (a gpu build runs on CUDA where ONNX Runtime offers it).

        backbone: a backbone graph to use instead of the folder's (a bidirectional re-export, say).
        step: how a decoding step runs, as far as the folder allows (the chosen one is `self.step`);
        None: the provider's default (DEFAULT_STEP).
          "device": the whole step on the execution provider, the graphs joined by the build's glue
                    graphs, only tokens and scores back to the host;
          "graph":  the graphs joined on the host, cells scored by the build's cell-scoring graphs;
          "numpy":  the graphs joined on the host, cells scored in numpy: the reference.
        Published folders have neither glue nor scoring graphs, and run "numpy".
        profile_dir: run the three model graphs under ONNX Runtime's profiler (codes.checks.profiling reads it).
        asr_dir: the recogniser, for clips given without their transcript: a recogniser folder or a build
        holding one (None: the model folder's, if it has one); asr_provider: where it runs (None: provider).
        """
        self.manifest = read_manifest(model_dir)
        if self.manifest.is_codec or (not self.manifest.sub_models and self.manifest.higgs):
            raise UserError(
                f"{model_dir} holds only a Higgs codec; pass it as --higgs_dir and a backbone build as --model_dir"
            )
        if not self.manifest.sub_models and (self.manifest.asr or self.manifest.aligner):
            raise UserError(f"{model_dir} holds only a recogniser or an aligner; pass a backbone build as --model_dir "
                            "(a recogniser folder as --asr_dir)")
        if backbone is None and self.manifest.attention not in ("bidirectional", "unknown"):
            raise UserError(f"{model_dir} holds a {self.manifest.attention} backbone: {CAUSAL_ADVICE}")
        if step is not None and step not in STEPS:
            raise UserError(f"step must be one of {', '.join(STEPS)}, got {step!r}")
        self.provider = resolve_provider(provider, self.manifest.data.get("execution_provider"))
        step = step or DEFAULT_STEP[self.provider]
        self.threads = threads
        self._profile_dir = profile_dir
        self.timings: defaultdict[str, float] = defaultdict(float)  # seconds per stage, accumulated
        # Two at a time: ONNX Runtime and tokenizers let the GIL go while they load (a full-size build's
        # sessions and tokenizer in 0.7-1.1 s against 1.3 s one after another, on 2 cores).
        with ThreadPoolExecutor(max_workers=2) as loading:
            own = backbone is None  # a build's own backbone: its precision decides its attention kernel
            backbone_loaded = loading.submit(
                open_backbone, Path(backbone) if backbone else self.manifest.path_of(specs.BACKBONE.key),
                self.provider, threads, profile_dir,
                probe=backbone is not None or self.manifest.attention != "bidirectional",
                precision=self.manifest.graph_precision.get("llm") if own else None,
                head_dim=(self.manifest.data.get("model") or {}).get("head_dim") if own else None)
            embeddings_loaded, heads_loaded = (
                loading.submit(make_session, self.manifest.path_of(spec.key), self.provider, threads, profile_dir)
                for spec in (specs.EMBEDDINGS, specs.HEADS))
            tokenizer_loaded = loading.submit(TextTokenizer.from_dir, self.manifest.folder)
            backbone_runner, embeddings, heads = (backbone_loaded.result(), embeddings_loaded.result(),
                                                  heads_loaded.result())
            self.tokenizer = tokenizer_loaded.result()
        has_scoring = bool(self.manifest.data.get("scoring"))
        glue = ({key: self._session(entry) for key, entry in self.manifest.data.get("glue", {}).items()}
                if step == "device" and has_scoring else {})
        # The provider's name (cpu, cuda) is the ONNX Runtime device a step's tensors are left on.
        self.forward = StepForward(embeddings, backbone_runner, heads, glue, self.provider, self.timings)
        self.kernels = backbone_runner.session.kernels  # "ours" or "onnx" (contract/native_kernels.py)
        # What the folder allows of what was asked: the device needs glue and scoring graphs that fit,
        # the graph path scoring graphs (published folders have neither).
        self.step = ("device" if self.forward.on_device else "graph") if step != "numpy" and has_scoring else "numpy"
        self._scoring_sessions: dict[str, object] = {}
        self.defaults = GenerationSettings()
        self._higgs_dir = Path(higgs_dir) if higgs_dir else None
        self._codec = None
        self._asr_dir = Path(asr_dir) if asr_dir else None
        if self._asr_dir is not None:
            self.recogniser_dir()  # a wrong asr_dir fails here, not at the first clip without a transcript
        self._asr_provider = asr_provider
        self._recogniser = None
        self._aligner = None
        self._recogniser_lock = threading.Lock()  # the server loads it from whichever pool thread asks first
        self.sample_rate = SAMPLE_RATE

    def folders(self) -> tuple[str, str | None, str | None]:
        """(model, codec, recogniser) folders as given, absolute: what another process loads the same build from."""
        def absolute(path):
            return str(Path(path).resolve()) if path else None

        return absolute(self.manifest.folder), absolute(self._higgs_dir), absolute(self._asr_dir)

    def build_key(self) -> str:
        """What results made with this build depend on (manifest.build_key): a fingerprint's part."""
        return build_key(self.manifest.folder, self._higgs_dir)

    # --- the codec, loaded on first use (code-only generation never needs it) -----------------

    @property
    def codec(self):
        if self._codec is None:
            from codes.runtime.audio.codec import HiggsCodec

            holder = read_manifest(self._higgs_dir) if self._higgs_dir is not None else self.manifest
            folder, section = holder.codec()
            self._codec = HiggsCodec(folder, section, providers=providers_for(self.provider), threads=self.threads)
        return self._codec

    # --- the recogniser, loaded on first use (clips with their transcripts never need it) --------

    @property
    def has_recogniser(self) -> bool:
        """Whether a clip may come without its transcript (the build holds a recogniser, or asr_dir names one)."""
        return self._asr_dir is not None or self.manifest.asr is not None

    def recogniser_dir(self) -> Path:
        """The recogniser's folder: asr_dir's, else the build's (a one-line UserError where there is none)."""
        return recogniser_folder(self._asr_dir) if self._asr_dir is not None else self.manifest.recogniser()

    def load_recogniser(self, provider: str | None = None):
        """The recogniser (codes/runtime/recognition/asr.py), loaded and its files' hashes checked on the first call, on
        `provider` (default: asr_provider, else the engine's); later calls return that one."""
        with self._recogniser_lock:
            if self._recogniser is None:
                from codes.runtime.recognition.asr import Recogniser

                provider = provider or self._asr_provider or self.provider
                self._recogniser = Recogniser(self.recogniser_dir(), provider=provider, threads=self.threads)
        return self._recogniser

    # --- word timings: the aligner times the text spoken in the audio made --------------------

    def aligner_dir(self) -> Path:
        """What times words: the build's aligner (optimize.py --include-aligner), else its recogniser's folder."""
        return self.manifest.aligner_folder() if self.manifest.aligner else self.recogniser_dir()

    @property
    def has_word_timings(self) -> bool:
        """Whether align_words can run: the build has an aligner, or a recogniser built with what alignment
        reads (a recogniser built before word timings still transcribes, but does not align)."""
        if not (self.manifest.aligner or self.has_recogniser):
            return False
        try:
            return "alignment" in read_asr_manifest(self.aligner_dir())
        except UserError:
            return False

    def check_word_timings(self) -> None:
        """The one-line UserError align_words gives where it cannot run, for a caller to raise before any work."""
        if self.has_word_timings:
            return
        if self.manifest.aligner or self.has_recogniser:
            self.aligner_dir()  # a damaged aligner says so in its own words
            raise UserError(NO_ALIGNMENT.format(folder=self.aligner_dir()))
        raise UserError(f"{self.manifest.folder} has no aligner or recogniser, which word timings need: build one "
                        "with `python optimize.py --include-aligner --aligner-model M` (or --include-asr)")

    def load_aligner(self):
        """The aligner (codes/runtime/recognition/aligner.py) over aligner_dir(), loaded and checked on the first call."""
        with self._recogniser_lock:
            if self._aligner is None:
                from codes.runtime.recognition.aligner import Aligner

                provider = self._asr_provider or self.provider
                self._aligner = Aligner(self.aligner_dir(), provider=provider, threads=self.threads)
        return self._aligner

    def _aligned_language(self, aligner, language: str | None) -> str | None:
        code = resolve_language(language)
        return code if code is not None and aligner.knows_language(code) else None

    def align_words(self, wav_24k: np.ndarray, text: str, language: str | None = None,
                    written: str | None = None) -> list[dict]:
        """When each word of `text` is heard in `wav_24k` (24 kHz, as generate returns it):
        [{"word", "start", "end"}] in seconds from the audio's start, by forced alignment as openai-whisper
        times words (docs/DESIGN.md §word-timings), with the build's aligner (or its recogniser).

        text: what was spoken (after normalize_text, if it ran); written: the text before it, whose words are
        reported where they match the spoken ones one to one. language: as generate takes it (an id or a
        name; None, or one Whisper does not know, is detected from the audio). Tags such as [laughter] are
        not words; text with nothing to align gives []. An empty waveform, or a build that cannot align,
        is a UserError. Pure computation on ONNX Runtime sessions: a server calls it from an executor thread."""
        return self.align_pieces([(wav_24k, text, language, written)])[0]

    def align_pieces(self, pieces: Sequence[tuple]) -> list[list[dict]]:
        """align_words for several pieces at once ((wav_24k, text, language, written) each), packed end to end
        into shared 30 s windows (Aligner.align_pieces): each piece's words on its own time. A script's
        captions and a stream's queued chunks pay one window per 30 s of speech, not one per piece."""
        from codes.runtime.recognition.aligner import Piece

        self.check_word_timings()
        aligner = self.load_aligner()
        return aligner.align_pieces([
            Piece(wav, SAMPLE_RATE, without_tags(text), self._aligned_language(aligner, language),
                  None if written is None else without_tags(written))
            for wav, text, language, written in pieces])

    # --- one step: embeddings -> backbone -> heads -> cell scores --------------------------------

    def _timed(self, stage: str, fn, *args):
        return timed(self.timings, stage, fn, *args)

    def target_logits(self, input_ids: np.ndarray, batch: CfgBatch, target_lens: list[int]):
        """Each item's (cond, uncond) target logits, [8, T_i, V] each, on the host."""
        logits = self.forward.host_logits(input_ids, batch, target_lens)
        num_items = len(target_lens)
        return [(logits[item, :, :t], logits[num_items + item, :, :t]) for item, t in enumerate(target_lens)]

    def score_fn(self, settings: GenerationSettings | Sequence[GenerationSettings]) -> ScoreFn:
        """How cells are scored under `settings` (one for all items, or one per item): the build's
        cell-scoring graph, or the numpy reference."""
        if self.step != "numpy":
            return self.graph_scores(settings)
        return numpy_scores(self.target_logits, settings)

    def graph_scores(self, settings: GenerationSettings | Sequence[GenerationSettings]) -> ScoreFn:
        """A ScoreFn on the cell-scoring graph: the logits stay on the provider's device (I/O binding),
        only each cell's token and score come back. Each item's noise is drawn here, on the host,
        from its own source, in the numpy path's order (class, then position), and passed in."""
        device = self.forward.device

        def score(input_ids: np.ndarray, batch: CfgBatch, target_lens: list[int], noises: list) -> list:
            num_items, longest = len(target_lens), max(target_lens)
            item_settings = per_item(settings, num_items)
            sampled = any(s.class_temperature > 0 for s in item_settings)
            spec = specs.SCORING_SAMPLED if sampled else specs.SCORING
            if self.step == "device":
                logits = self.forward.device_logits(input_ids, batch, target_lens)
            else:
                logits = self.forward.host_logits(input_ids, batch, target_lens, device)
            start = time.perf_counter()
            feeds = {"position_uniform": np.zeros((num_items, NUM_CODEBOOKS, longest), np.float32)}
            if sampled:
                feeds["class_uniform"] = np.zeros((num_items, NUM_CODEBOOKS, longest, AUDIO_VOCAB_SIZE), np.float32)
            for item, (noise, target_len, s) in enumerate(zip(noises, target_lens, item_settings)):
                if noise is None:
                    continue
                if s.class_temperature > 0:
                    feeds["class_uniform"][item, :, :target_len] = noise.uniform((NUM_CODEBOOKS, target_len, AUDIO_VOCAB_SIZE))
                if s.position_temperature > 0:
                    feeds["position_uniform"][item, :, :target_len] = noise.uniform((NUM_CODEBOOKS, target_len))
            for name in ("guidance_scale", "layer_penalty_factor", "position_temperature") + (("class_temperature",) if sampled else ()):
                feeds[name] = np.array([getattr(s, name) for s in item_settings], np.float32)
            self.timings["noise"] += time.perf_counter() - start
            outputs = self._timed("scoring", run_bound, self._scoring_session(spec),
                                  {spec.input_names[0]: logits, **feeds}, dict.fromkeys(spec.output_names, "cpu"))
            tokens, scores = (value.numpy() for value in outputs)
            return [None if noise is None else (tokens[item, :, :t], scores[item, :, :t])
                    for item, (noise, t) in enumerate(zip(noises, target_lens))]

        return score

    def sessions(self) -> dict:
        """The model graphs' sessions by graph key (the cell-scoring ones once used)."""
        forward = self.forward
        return {specs.EMBEDDINGS.key: forward.embeddings, specs.BACKBONE.key: forward.backbone.session,
                specs.HEADS.key: forward.heads, **forward.glue, **self._scoring_sessions}

    def _session(self, entry: dict):
        return make_session(self.manifest.folder / entry["filename"], self.provider, self.threads, self._profile_dir)

    def _scoring_session(self, spec):
        if spec.key not in self._scoring_sessions:
            entry = self.manifest.data["scoring"].get(spec.key)
            if entry is None:
                raise UserError(f"{self.manifest.folder} has no {spec.key} graph; rebuild it with optimize.py")
            self._scoring_sessions[spec.key] = self._session(entry)
        return self._scoring_sessions[spec.key]

    # --- voices ----------------------------------------------------------------------------------

    def prepare_reference(self, ref_audio, ref_text: str | None = None,
                          preprocess_prompt: bool = True) -> tuple[np.ndarray, float, str]:
        """(24 kHz waveform in whole codec hops, ref_rms, transcript as a voice keeps it) for a reference clip:
        upstream's `create_voice_clone_prompt` up to the codec, in its order, and the one path every clip
        takes. Without a transcript (None or blank) the clip is prepared as any other (resampled, a quiet
        one raised), then, with preprocess_prompt, trimmed when over 20 s and its silences shortened, and
        that waveform is transcribed; the text, given or heard, then gets its end punctuation."""
        needs_text = needs_transcript(ref_text)
        if needs_text and not self.has_recogniser:
            raise UserError(NO_RECOGNISER.format(folder=self.manifest.folder))
        wav, rate = audio_ops.read_audio(ref_audio) if isinstance(ref_audio, (str, Path)) else ref_audio
        wav, ref_rms = audio_ops.clean_reference(np.asarray(wav, dtype=np.float32), rate, preprocess_prompt,
                                                 ref_text_known=not needs_text)
        hops = audio_ops.whole_hops(wav)  # too short for the codec: refused before it is transcribed
        if needs_text:
            ref_text = self.load_recogniser().transcribe(wav, SAMPLE_RATE)
            if not ref_text:
                raise UserError("the recogniser heard no words in the reference clip; pass its transcript (ref_text)")
        return hops, ref_rms, add_punctuation(ref_text) if preprocess_prompt else ref_text

    def transcribe_reference(self, ref_audio, preprocess_prompt: bool = True) -> str:
        """The transcript a clip given without one gets: the text `create_voice(ref_audio)` keeps."""
        return self.prepare_reference(ref_audio, None, preprocess_prompt)[2]

    def create_voice(self, ref_audio, ref_text: str | None = None, preprocess_prompt: bool = True) -> Voice:
        """Reference audio (a path or (waveform, sample_rate)) and its transcript (None: the recogniser's)
        -> a reusable Voice."""
        wav, ref_rms, text = self.prepare_reference(ref_audio, ref_text, preprocess_prompt)
        return Voice(self.codec.encode(wav, SAMPLE_RATE), text, ref_rms)

    def create_voices(self, ref_audio, ref_text, preprocess_prompt: bool = True) -> Voice | list[Voice | None]:
        """create_voice for one clip, or for each of a list of clips (with one transcript, or None, each); a
        None clip in the list is an item without a voice. A clip listed twice is encoded once."""
        if not isinstance(ref_audio, list):
            return self.create_voice(ref_audio, ref_text, preprocess_prompt)
        texts = one_per_text(ref_text, len(ref_audio), "ref_text")
        made: dict[tuple, Voice] = {}
        voices = []
        for clip, clip_text in zip(ref_audio, texts):
            if clip is None:
                voices.append(None)
                continue
            key = (str(clip), clip_text) if isinstance(clip, (str, Path)) else (id(clip), clip_text)
            if key not in made:
                made[key] = self.create_voice(clip, clip_text, preprocess_prompt)
            voices.append(made[key])
        return voices

    # --- generation ------------------------------------------------------------------------------

    def settle(self, texts: Sequence[str], language=None, instruct=None, voice: Voice | Sequence[Voice | None] | None = None,
               duration=None, speed=None, num_frames=None, normalize_text: bool = False) -> list[Request]:
        """settle(), the module's: the requests need nothing of the build."""
        return settle(texts, language, instruct, voice, duration, speed, num_frames, normalize_text)

    def generate_codes(self, requests: list[Request], settings: GenerationSettings,
                       noise: NoiseSource | Sequence[NoiseSource] | None = None,
                       on_step: Callable[[int, int], None] | None = None) -> list[list[np.ndarray]]:
        """Codes for each request: a list of [8, T] chunks (one unless the text is long).

        noise: one source per request (each request's codes then depend on nothing else in the batch),
        or one source shared in upstream's draw order; None: a fresh source per request."""
        return self.decode_plan(plan_decoding(requests, settings, noise), settings, on_step)

    def decode_plan(self, plan: DecodingPlan, settings: GenerationSettings,
                    on_step: Callable[[int, int], None] | None = None) -> list[list[np.ndarray]]:
        """Codes for each request of a plan (codes.runtime.request.plan_decoding), round by round: a list of [8, T]
        chunks. A long request without a voice clones its first chunk's codes and text from its second on."""
        results: list[list[np.ndarray]] = [[] for _ in plan.requests]
        first_chunk: dict[int, Voice] = {}
        for batch in plan.rounds:
            requests = [replace(r, voice=first_chunk[i]) if i in first_chunk else r for i, r in batch]
            noises = [plan.noises[i] for i, _ in batch]
            for (i, request), codes in zip(batch, self.generate_whole(requests, settings, noises, on_step)):
                results[i].append(codes)
                if i in plan.clones_first_chunk and i not in first_chunk:
                    first_chunk[i] = first_chunk_voice(codes, request.text)
        return results

    def generate_whole(self, requests: list[Request], settings: GenerationSettings, noise,
                       on_step: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
        """Codes [8, target_len] for each request decoded as one piece, whatever its length
        (generate_codes chunks a long one first); noise as generate_codes takes it."""
        start = time.perf_counter()
        batch = prompt_batch(self.tokenizer, requests, settings.denoise)
        self.timings["prompt"] += time.perf_counter() - start
        return iterative_decode(batch, [r.target_len for r in requests], None, settings, noise, on_step,
                                score_fn=self.score_fn(settings))

    def decode(self, chunks: list[np.ndarray], ref_rms: float | None, settings: GenerationSettings) -> np.ndarray:
        """Codes -> post-processed 24 kHz audio, as upstream's `_decode_and_post_process`."""
        pieces = [self._timed("codec", self.codec.decode, codes) for codes in chunks]
        wav = audio_ops.cross_fade_chunks(pieces, SAMPLE_RATE)
        return self._timed("post-processing", audio_ops.post_process, wav, ref_rms, settings, SAMPLE_RATE).astype(np.float32)

    def synthesize(self, requests: list[Request], settings: GenerationSettings,
                   noise: NoiseSource | Sequence[NoiseSource] | None = None, on_step=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Audio (float32, 24 kHz) and codes [8, T] for each settled request (noise as generate_codes takes it)."""
        return self.synthesize_plan(plan_decoding(requests, settings, noise), settings, on_step)

    def synthesize_plan(self, plan: DecodingPlan, settings: GenerationSettings,
                        on_step=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Audio (float32, 24 kHz) and codes [8, T] for each request of a plan."""
        chunked = self.decode_plan(plan, settings, on_step)
        audios = [self.decode(chunks, request.voice.rms if request.voice else None, settings)
                  for request, chunks in zip(plan.requests, chunked)]
        return audios, [np.concatenate(chunks, axis=1) for chunks in chunked]

    def generate(self, text, language=None, instruct=None, ref_audio=None, ref_text=None,
                 voice: Voice | Sequence[Voice | None] | None = None, duration=None, speed=None, num_frames=None,
                 seed: int | None = None, noise: NoiseSource | None = None, return_codes: bool = False,
                 on_step=None, normalize_text: bool = False, settings: GenerationSettings | None = None,
                 **settings_overrides):
        """Speech for one text (an array) or a list of texts (a list of arrays), float32 at 24 kHz.

        Every argument may be one value or one per text; a voice (or ref_audio with ref_text) per text
        clones several voices in one batch. Settings (num_steps, guidance_scale, t_shift, ...) are
        `settings` (default GenerationSettings()) with settings_overrides applied.
        With return_codes, returns (audio, codes) where codes are [8, T] per item. Item i of a seeded
        batch draws its noise from seed + i, so it sounds as it would alone with that seed.
        """
        settings = (settings or self.defaults).replace(**settings_overrides)
        if voice is None and ref_audio is not None:
            voice = self.create_voices(ref_audio, ref_text, settings.preprocess_prompt)
        requests = self.settle(text, language, instruct, voice, duration, speed, num_frames, normalize_text)
        planned = plan_decoding(requests, settings, noise, seed)
        audios, codes = self.synthesize_plan(planned, settings, on_step)
        single = isinstance(text, str)
        out_audio = audios[0] if single else audios
        if return_codes:
            return out_audio, (codes[0] if single else codes)
        return out_audio
