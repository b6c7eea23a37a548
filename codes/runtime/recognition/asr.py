"""Torch-free transcription of a reference clip, as upstream's transformers ASR pipeline does it.

`WhisperModel` is a Whisper build's graphs, features and tokenizer, shared by the two jobs a Whisper does
here: `Recogniser` transcribes (this module) and `Aligner` times the words of a known text
(codes/runtime/recognition/aligner.py).

Upstream (`OmniVoice.transcribe`) hands the prepared 24 kHz clip to
`pipeline("automatic-speech-recognition", model=<Whisper>)` and strips the text. The pipeline
resamples to 16 kHz with torchaudio, pads to 30 s and takes a log-mel spectrogram, detects the
language, decodes with a 5-beam search under the checkpoint's generation config (transformers 5
adds num_beams=5; its max_new_tokens=256 is dropped because Whisper's config sets max_length),
and detokenizes with its Whisper-specific `_decode_asr`. Every step is here, in numpy, over the
encoder and decoder graphs that `codes/export/asr_build.py` writes; the small functions keep
transformers' granularity so each can be tested against its twin (tests/runtime/test_asr.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.common.fileio import known_sha256, read_json_object
from codes.runtime.audio.processing import resample, to_mono
from codes.runtime.contract.specs import ASR_MANIFEST_NAME as MANIFEST_NAME
FORMAT = "omnivoice-onnx-asr"
NEG_LARGE = np.float32(-1.0e9)  # transformers' beam-search "never pick this" offset
TIMESTAMP_TEXT = re.compile(r"<\|(\d+\.\d+)\|>")  # WhisperTokenizer.decode drops these from the text
ALIGNMENT_OUTPUT = "alignment_qk"  # the decoder's output word timings read (codes/export/asr_build.py)
NO_ALIGNMENT = ("{folder} was built before word timings; rebuild the recogniser with optimize.py --include-asr "
                "(or --asr-only), or build an aligner with --include-aligner, to align words")


# ---------------------------------------------------------------- features

def log_mel(wav: np.ndarray, mel_filters: np.ndarray, n_fft: int = 400, hop_length: int = 160,
            block_frames: int = 3000) -> np.ndarray:
    """The log-mel [n_mels, len(wav) // hop] of a whole waveform, as WhisperFeatureExtractor and openai-whisper's
    log_mel_spectrogram both take it: torch.stft(center=True) frames (reflect-padded half a window each side,
    periodic Hann window) less the last, clamped 8 below the peak, scaled. In blocks of frames, so a long
    clip never holds all its spectra at once."""
    padded = np.pad(wav, n_fft // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop_length][:-1]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    filters = mel_filters.T.astype(np.float32)
    mel = np.empty((filters.shape[0], len(frames)), np.float32)
    for start in range(0, len(frames), block_frames):
        spectrum = np.fft.rfft(frames[start : start + block_frames] * window, axis=-1)
        power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32)
        mel[:, start : start + len(power)] = filters @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def log_mel_features(wav_16k: np.ndarray, mel_filters: np.ndarray, n_fft: int = 400, hop_length: int = 160,
                     n_samples: int = 480_000) -> np.ndarray:
    """WhisperFeatureExtractor's log-mel [n_mels, n_samples // hop] of a clip padded (with zeros) to 30 s."""
    wav = np.zeros(n_samples, np.float32)
    wav[: min(len(wav_16k), n_samples)] = wav_16k[:n_samples]
    return log_mel(wav, mel_filters, n_fft, hop_length, block_frames=n_samples // hop_length)


# ---------------------------------------------------------------- logits processors

def suppress(log_probs: np.ndarray, token_ids) -> np.ndarray:
    """SuppressTokensLogitsProcessor (and, at the first step, SuppressTokensAtBeginLogitsProcessor)."""
    out = log_probs.copy()
    out[..., list(token_ids)] = -np.inf
    return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits.astype(np.float32, copy=False)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32)


def detect_language(first_logits: np.ndarray, language_ids: list[int]) -> int:
    """WhisperGenerationMixin.detect_language: argmax over the language tokens after <|startoftranscript|>."""
    ids = np.asarray(language_ids)
    return int(ids[np.argmax(first_logits[ids])])


# ---------------------------------------------------------------- beam search (transformers 5's vectorised one)

def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest along the last axis, best first (torch.topk; exact ties stay out of tests)."""
    part = np.argpartition(-values, k - 1, axis=-1)[..., :k]
    order = np.argsort(-np.take_along_axis(values, part, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(part, order, axis=-1)


def early_stop_unsatisfied(unsatisfied: bool, running_scores: np.ndarray, finished_scores: np.ndarray,
                           finished: np.ndarray, cur_len: int, prompt_len: int, max_length: int,
                           early_stopping, length_penalty: float) -> bool:
    """GenerationMixin._check_early_stop_heuristic for one batch item."""
    if early_stopping == "never" and length_penalty > 0.0:
        length = max_length - prompt_len
    else:
        length = cur_len - prompt_len
    best_running = np.float32(running_scores[0] / np.float32(length**length_penalty))
    # torch.where(is_sent_finished, min, -1e9): each beam slot is its own threshold
    thresholds = np.where(finished, finished_scores.min(), np.float32(-1.0e9))
    return bool(unsatisfied and np.any(best_running > thresholds))


@dataclass
class BeamState:
    running: np.ndarray  # [beams, max_length] int64
    running_scores: np.ndarray  # [beams] float32
    finished: np.ndarray  # [beams, max_length]
    finished_scores: np.ndarray  # [beams]
    finished_lengths: np.ndarray  # [beams] tokens generated by each finished hypothesis
    is_finished: np.ndarray  # [beams] bool
    unsatisfied: bool = True


def beam_step(state: BeamState, log_probs: np.ndarray, cur_len: int, prompt_len: int, max_length: int,
              eos_token_id: int, num_beams: int, length_penalty: float, early_stopping) -> tuple[BeamState, np.ndarray, bool]:
    """One iteration of GenerationMixin._beam_search for one batch item; returns the new state, the
    source beam of each new running beam (to reorder the cache) and whether to go on."""
    vocab = log_probs.shape[-1]
    keep = 2 * num_beams  # max(2, 1 + one eos) * num_beams
    accumulated = (log_probs + state.running_scores[:, None]).reshape(-1)
    top = top_k(accumulated, keep)
    top_scores = accumulated[top]
    top_beams, top_tokens = top // vocab, top % vocab
    candidates = state.running[top_beams].copy()
    candidates[:, cur_len] = top_tokens
    hits_stop = (top_tokens == eos_token_id) | (cur_len + 1 >= max_length)

    # e. the best num_beams candidates that did not stop run on
    running_candidates = top_scores + hits_stop.astype(np.float32) * NEG_LARGE
    next_running = top_k(running_candidates, num_beams)
    running = candidates[next_running]
    running_scores = running_candidates[next_running].astype(np.float32)
    source_beams = top_beams[next_running]

    # f. candidates among the top num_beams that stopped may enter the finished set
    just_finished = hits_stop & (np.arange(keep) < num_beams)
    finished_candidates = (top_scores / np.float32((cur_len + 1 - prompt_len) ** length_penalty)).astype(np.float32)
    if early_stopping is True and state.is_finished.all():
        finished_candidates = finished_candidates + NEG_LARGE
    if not state.unsatisfied:
        finished_candidates = finished_candidates + NEG_LARGE
    finished_candidates = finished_candidates + (~just_finished).astype(np.float32) * NEG_LARGE
    merged_scores = np.concatenate([state.finished_scores, finished_candidates])
    merged = np.concatenate([state.finished, candidates])
    merged_lengths = np.concatenate([state.finished_lengths, np.full(keep, cur_len + 1 - prompt_len)])
    merged_is_finished = np.concatenate([state.is_finished, just_finished])
    best = top_k(merged_scores, num_beams)
    new = BeamState(running, running_scores, merged[best], merged_scores[best].astype(np.float32),
                    merged_lengths[best], merged_is_finished[best], state.unsatisfied)

    # g. stop when no running beam can beat the finished ones, or nothing can continue
    new.unsatisfied = early_stop_unsatisfied(state.unsatisfied, running_scores, new.finished_scores,
                                             new.is_finished, cur_len + 1, prompt_len, max_length,
                                             early_stopping, length_penalty)
    go_on = new.unsatisfied and not (new.is_finished.all() and early_stopping is True) and not hits_stop[:keep].all()
    return new, source_beams, go_on


# ---------------------------------------------------------------- segments and text

def strip_generated(sequence: list[int], pad_token_id: int, eos_token_id: int) -> list[int]:
    """generate_with_fallback's clean-up: trailing padding (all pad tokens, less one when pad is eos), then eos."""
    if sequence and sequence[-1] == pad_token_id:
        paddings = sum(1 for token in sequence if token == pad_token_id)
        if pad_token_id == eos_token_id:
            paddings -= 1
        if paddings:
            sequence = sequence[:-paddings]
    if sequence and sequence[-1] == eos_token_id:
        sequence = sequence[:-1]
    return sequence


def split_segments(sequence: list[int], timestamp_begin: int, seek_num_frames: int, input_stride: int = 2) -> tuple[list[list[int]], int]:
    """WhisperGenerationMixin._retrieve_segment: the token slices kept and how many frames to seek on.

    A pair of timestamps ends a segment; what follows the last pair (an unfinished segment) is
    dropped and the search restarts from the last timestamp's frame."""
    is_time = [token >= timestamp_begin for token in sequence]
    single_ending = is_time[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(is_time) - 1) if is_time[i] and is_time[i + 1]]
    if not cuts:
        return [sequence], seek_num_frames
    if single_ending:
        cuts.append(len(sequence))
    else:
        cuts[-1] += 1
    slices, last = [], 0
    for cut in cuts:
        slices.append(sequence[last:cut])
        last = cut
    if single_ending:
        return slices, seek_num_frames
    return slices, (sequence[last - 2] - timestamp_begin) * input_stride


def longest_common_merge(sequences: list[list[int]]) -> list[int]:
    """transformers' _find_longest_common_sequence (token ids only): join sequences at their best overlap."""
    left = sequences[0]
    total: list[int] = []
    for right in sequences[1:]:
        best, best_at = 0.0, (len(left), len(left), 0, 0)
        for i in range(1, len(left) + len(right)):
            eps = i / 10000.0
            left_start, left_stop = max(0, len(left) - i), min(len(left), len(left) + len(right) - i)
            right_start, right_stop = max(0, i - len(left)), min(len(right), i)
            matches = int(np.sum(np.array(left[left_start:left_stop]) == np.array(right[right_start:right_stop])))
            matching = matches / i + eps
            if matches > 1 and matching > best:
                best, best_at = matching, (left_start, left_stop, right_start, right_stop)
        left_start, left_stop, right_start, right_stop = best_at
        left_mid = (left_stop + left_start) // 2
        right_mid = (right_stop + right_start) // 2
        total.extend(left[:left_mid])
        left = right[right_mid:]
    total.extend(left)
    return total


@dataclass
class TextRules:
    """What `_decode_asr` needs to tell tokens apart, read from the build's manifest."""
    special_ids: frozenset
    language_names: dict  # special token id -> language name (transformers' LANGUAGES)
    timestamp_begin: int
    prompt_token_id: int
    decoder_start_token_id: int


def text_pieces(tokens: list[int], rules: TextRules) -> list[list[int]]:
    """The ASR pipeline's `_decode_asr` without timestamps or stride: token runs whose decoded texts it joins."""
    if tokens and tokens[0] == rules.prompt_token_id:
        tokens = tokens[tokens.index(rules.decoder_start_token_id):] if rules.decoder_start_token_id in tokens else []
    chunks: list[list[list[int]]] = []  # each chunk: its list of previous token runs
    previous: list[list[int]] = []
    current: list[int] = []
    last_language = None
    time_precision = 0.02
    cur_max, penultimate, prev_len = 0.0, 0.0, 0.0
    chunk_start = None

    def close(runs):
        chunks.append(runs)

    for i, token in enumerate(tokens):
        if token in rules.special_ids:
            language = rules.language_names.get(token)
            if language is not None:
                if last_language and language != last_language:
                    previous.append(current)
                    close(previous)
                    previous, current, chunk_start = [], [], None
                last_language = language
        elif token >= rules.timestamp_begin:
            timestamp = float((token - rules.timestamp_begin) * time_precision)
            if timestamp < cur_max:
                single = i >= 2 and not (tokens[i - 1] >= rules.timestamp_begin and tokens[i - 2] >= rules.timestamp_begin)
                if single:
                    prev_len += time_precision * 1500
                else:
                    cur_max = penultimate
                    prev_len += penultimate
            penultimate, cur_max = cur_max, timestamp
            time = round((token - rules.timestamp_begin) * time_precision + prev_len, 2)
            if chunk_start is None:
                chunk_start = time
            elif time != chunk_start:
                previous.append(current)
                close(previous)
                previous, current, chunk_start = [], [], None
        else:
            current.append(token)
    if current:
        previous.append(current)
    elif not any(previous):
        previous = []
    if previous:
        close(previous)
    return [longest_common_merge(runs) for runs in chunks]


def clean_up_spaces(text: str) -> str:
    """PreTrainedTokenizerBase.clean_up_tokenization, for checkpoints whose tokenizer applies it."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


# ---------------------------------------------------------------- the recogniser

def _session(path: Path, provider: str, threads: int | None):
    from codes.runtime.contract.sessions import open_session

    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if provider == "cuda" else ["CPUExecutionProvider"]
    return open_session(path, providers, threads)


class WhisperModel:
    """A Whisper build (asr/ or aligner/: its manifest, graphs, tokenizer and mel filters), checked and loaded;
    what transcribing and aligning share."""

    REBUILD = "--include-asr"  # the optimize.py flag that builds this folder again

    def __init__(self, folder, provider: str = "cpu", threads: int | None = None, check_hashes: bool = True):
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        manifest = read_asr_manifest(self.folder)
        if provider not in ("cpu", "cuda"):
            raise UserError(f"provider {provider!r} is not supported; use cpu or cuda")
        self.manifest = manifest
        files = {**manifest["graphs"], **manifest["files"]}
        expected: dict[Path, str] = {}
        for name, entry in files.items():
            for key in ("file", "data"):
                if entry.get(key) is None:
                    continue
                path = self.folder / entry[key]
                if not path.is_file():
                    raise UserError(f"{path} is missing; rebuild it with optimize.py {self.REBUILD}")
                expected[path] = entry[f"{key}_sha256" if key == "data" else "sha256"]
        if check_hashes:
            for (path, digest), found in zip(expected.items(), known_sha256(list(expected))):
                if found != digest:
                    raise UserError(f"{path} does not match its sha256 in {MANIFEST_NAME}; rebuild with {self.REBUILD}")
        self.features = manifest["features"]
        self.generation = manifest["generation"]
        self.model = manifest["model"]
        self.mel_filters = np.load(self.folder / manifest["files"]["mel_filters"]["file"])
        self.tokenizer = Tokenizer.from_file(str(self.folder / manifest["files"]["tokenizer"]["file"]))
        text = manifest["text"]
        self.rules = TextRules(frozenset(text["special_ids"]), {int(k): v for k, v in text["language_names"].items()},
                               text["timestamp_begin"], text["prompt_token_id"], text["decoder_start_token_id"])
        self.clean_up = bool(text["clean_up_tokenization_spaces"])
        self.encoder = _session(self.folder / manifest["graphs"]["encoder"]["file"], provider, threads)
        self.decoder = _session(self.folder / manifest["graphs"]["decoder"]["file"], provider, threads)
        self.float_type = np.float16 if manifest["io_dtype"] == "float16" else np.float32
        self.last_token_count = 0

    # -- steps, each as the pipeline takes it

    def waveform_16k(self, waveform: np.ndarray, sample_rate: int, purpose: str = "transcribe") -> np.ndarray:
        """A clip checked and resampled to the features' rate (torchaudio's sinc, as the pipeline's F.resample)."""
        if not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
            raise UserError(f"sample_rate must be a positive integer, got {sample_rate!r}")
        wav = np.asarray(waveform, dtype=np.float32)
        if wav.ndim == 2 and 1 in wav.shape:
            wav = wav.reshape(-1)
        wav = to_mono(wav) if wav.ndim == 2 else wav
        if wav.ndim != 1 or wav.size == 0:
            raise UserError(f"a clip to {purpose} must be a non-empty mono waveform, got shape {list(np.shape(waveform))}")
        if not np.isfinite(wav).all():
            raise UserError("the clip holds NaN or infinite samples; pass a clean waveform")
        return resample(wav, int(sample_rate), self.features["sampling_rate"])

    def _encode(self, segment: np.ndarray) -> dict:
        outputs = self.encoder.run(None, {"audio_features": segment[None].astype(self.float_type)})
        names = [o.name for o in self.encoder.get_outputs()]
        return {name.replace("present_", "past_"): value for name, value in zip(names, outputs)
                if name.startswith("present_")}

    def _decode(self, input_ids: np.ndarray, past_self: dict, cross: dict) -> tuple[np.ndarray, dict]:
        feeds = {"input_ids": input_ids.astype(np.int32), **past_self, **cross}
        names = [o.name for o in self.decoder.get_outputs() if o.name != ALIGNMENT_OUTPUT]
        result = dict(zip(names, self.decoder.run(names, feeds)))
        present = {name.replace("present_", "past_"): value for name, value in result.items()
                   if name.startswith("present_")}
        return result["logits"][:, -1].astype(np.float32), present

    def _empty_past(self, batch: int) -> dict:
        layers, heads, size = self.model["decoder_layers"], self.model["decoder_heads"], self.model["head_size"]
        empty = np.zeros((batch, heads, 0, size), self.float_type)
        return {f"past_{kind}_self_{i}": empty for i in range(layers) for kind in ("key", "value")}

    def init_tokens(self, cross: dict) -> list[int]:
        tokens = list(self.generation["init_tokens"])
        if None in tokens:
            logits, _ = self._decode(np.array([[self.generation["decoder_start_token_id"]]]), self._empty_past(1), cross)
            tokens[tokens.index(None)] = detect_language(logits[0], self.generation["language_ids"])
        return tokens

    @property
    def has_alignment(self) -> bool:
        """Whether the build wrote what alignment reads (the decoder's alignment output and its heads)."""
        return "alignment" in self.manifest

    def alignment_logits(self, cross: dict, sequence_prefix: list[int], tokens: list[int]) -> np.ndarray:
        """The alignment heads' cross-attention logits [heads, sequence, frames] for the whole sequence
        [*sequence_prefix, *tokens, <|endoftext|>] (sequence_prefix: the sot_sequence, <|notimestamps|>)."""
        sequence = np.array([[*sequence_prefix, *tokens, self.generation["eos_token_id"]]], np.int32)
        feeds = {"input_ids": sequence, **self._empty_past(1), **cross}
        return self.decoder.run([ALIGNMENT_OUTPUT], feeds)[0][0]


class Recogniser(WhisperModel):
    """Whisper in ONNX: `Recogniser(folder).transcribe(waveform, sample_rate)` is upstream's transcript."""

    def features_of(self, waveform: np.ndarray, sample_rate: int) -> np.ndarray:
        """Resampled and log-mel'd as the pipeline does: [n_mels, frames] of one 30 s window."""
        rate = self.features["sampling_rate"]
        wav = self.waveform_16k(waveform, sample_rate)
        if len(wav) > self.features["n_samples"]:
            seconds = len(wav) / rate
            raise UserError(f"the clip is {seconds:.1f} s; the recogniser takes at most "
                            f"{self.features['n_samples'] / rate:.0f} s (upstream trims clips over 20 s first: "
                            "prepare it with preprocess_prompt, or pass its transcript)")
        return log_mel_features(wav, self.mel_filters, self.features["n_fft"], self.features["hop_length"],
                                self.features["n_samples"])

    def _max_length(self, prompt_len: int) -> int:
        """WhisperGenerationMixin._set_max_new_tokens_and_length, then generate()'s own length rule."""
        limit = self.model["max_target_positions"]
        max_new = self.generation["max_new_tokens"]
        if max_new is not None:
            if max_new + prompt_len > limit:
                max_new = limit - prompt_len
            return prompt_len + max_new
        initial = min(limit // 2 - 1, prompt_len)
        return min(self.generation["max_length"] + initial, limit)

    def search(self, cross: dict, prompt: list[int]) -> list[int]:
        """The beam search (or greedy, for num_beams 1) over the decoder graph; the generated tokens."""
        gen = self.generation
        beams, prompt_len = gen["num_beams"], len(prompt)
        max_length = self._max_length(prompt_len)
        eos, pad = gen["eos_token_id"], gen["pad_token_id"]
        begin = list(gen["begin_suppress_tokens"] or [])
        always = list(gen["suppress_tokens"] or [])

        def processed(logits, cur_len):
            log_probs = log_softmax(logits) if beams > 1 else logits
            log_probs = suppress(log_probs, always) if always else log_probs
            return suppress(log_probs, begin) if begin and cur_len == prompt_len else log_probs

        if beams == 1:
            tokens, past = list(prompt), self._empty_past(1)
            step_ids = np.array([prompt])
            while True:
                logits, past = self._decode(step_ids, past, cross)
                token = int(np.argmax(processed(logits, len(tokens))[0]))
                tokens.append(token)
                if token == eos or len(tokens) >= max_length:
                    break
                step_ids = np.array([[token]])
            self.last_token_count = len(tokens) - prompt_len
            return tokens[prompt_len:]

        cross = {name: np.repeat(value, beams, axis=0) for name, value in cross.items()}
        running = np.full((beams, max_length), pad if pad is not None else eos, np.int64)
        running[:, :prompt_len] = prompt
        state = BeamState(running, np.array([0.0] + [-1e9] * (beams - 1), np.float32), running.copy(),
                          np.full(beams, -1e9, np.float32), np.zeros(beams, np.int64), np.zeros(beams, bool))
        past, step_ids, cur_len = self._empty_past(beams), running[:, :prompt_len], prompt_len
        while True:
            logits, past = self._decode(step_ids, past, cross)
            state, sources, go_on = beam_step(state, processed(logits, cur_len), cur_len, prompt_len, max_length,
                                              eos, beams, gen["length_penalty"], gen["early_stopping"])
            cur_len += 1
            if not go_on:
                break
            past = {name: value[sources] for name, value in past.items()}
            step_ids = state.running[:, cur_len - 1 : cur_len]
        length = int(state.finished_lengths[0])
        self.last_token_count = length
        return state.finished[0, prompt_len : prompt_len + length].tolist()

    def generate(self, features: np.ndarray) -> list[int]:
        """WhisperGenerationMixin.generate as the pipeline calls it: the seek loop over 30 s segments."""
        gen = self.generation
        segment_frames = self.model["max_source_positions"] * 2
        max_frames, seek, tokens, prompt, generated = features.shape[-1], 0, [], None, 0
        while seek < max_frames:
            seek_frames = min(max_frames - seek, segment_frames)
            segment = np.zeros((features.shape[0], segment_frames), np.float32)
            segment[:, :seek_frames] = features[:, seek : seek + seek_frames]
            cross = self._encode(segment)
            prompt = prompt or self.init_tokens(cross)  # the language is detected once, on the first segment
            sequence = strip_generated(self.search(cross, prompt), gen["pad_token_id"], gen["eos_token_id"])
            generated += self.last_token_count
            slices, offset = split_segments(sequence, self.rules.timestamp_begin, seek_frames)
            if offset <= 0:
                raise UserError("the recogniser decoded a timestamp pair at 0 s and would loop; "
                                "this checkpoint cannot transcribe the clip")
            tokens.extend(token for piece in slices for token in piece)
            seek += offset
        self.last_token_count = generated
        return tokens

    def text_of(self, tokens: list[int]) -> str:
        texts = []
        for piece in text_pieces(tokens, self.rules):
            text = self.tokenizer.decode(piece, skip_special_tokens=False)
            texts.append(TIMESTAMP_TEXT.sub("", clean_up_spaces(text) if self.clean_up else text))
        return "".join(texts)

    def probe(self) -> None:
        """One window through each graph (the encoder, then the decoder over the first tokens, and over a
        word for its alignment output): what a build runs once before it installs a recogniser, since a
        broken graph may crash the process."""
        rate = self.features["sampling_rate"]
        noise = np.random.default_rng(0).standard_normal(rate).astype(np.float32) * np.float32(0.1)
        cross = self._encode(self.features_of(noise, rate))
        prompt = self.init_tokens(cross)
        self._decode(np.array([prompt]), self._empty_past(1), cross)
        if self.has_alignment:
            eot = self.generation["eos_token_id"]
            word = [t for t in self.tokenizer.encode(" probe", add_special_tokens=False).ids if t < eot]
            self.alignment_logits(cross, prompt, word)

    def transcribe(self, waveform: np.ndarray, sample_rate: int) -> str:
        """The clip's text, as upstream's `transcribe((waveform, sample_rate))` returns it (stripped)."""
        return self.text_of(self.generate(self.features_of(waveform, sample_rate))).strip()


def read_asr_manifest(folder) -> dict:
    """A recogniser folder's asr_manifest.json, checked to be one; every problem is a one-line UserError."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise UserError(f"{folder} has no {MANIFEST_NAME}; build the recogniser with optimize.py --include-asr")
    manifest = read_json_object(path, "rebuild the recogniser with optimize.py --include-asr")
    if manifest.get("format") != FORMAT:
        raise UserError(f"{path} is not an omnivoice-onnx recogniser manifest; rebuild with --include-asr")
    return manifest


def seconds_limit(folder) -> float:
    """The longest clip a recogniser folder takes, in seconds."""
    features = read_asr_manifest(folder)["features"]
    return features["n_samples"] / features["sampling_rate"]

