"""Word timings: a known text aligned to the audio it was spoken in, as openai-whisper's find_alignment does.

`Aligner` runs a Whisper build's encoder and its decoder's alignment output (codes/export/asr_build.py) over
windows of audio, and the maths of codes/runtime/recognition/alignment.py over what they give. Any Whisper aligns: an
`aligner/` built for it (optimize.py --include-aligner: a small one, in fp32, is fast and exact) or the
recogniser's `asr/` (large-v3-turbo's, upstream's transcriber) where the build has no aligner.

Two ways in: `align` times one clip of any length, window by window; `align_pieces` packs several short
pieces (a script's segments, a stream's chunks) end to end into shared 30 s windows, as openai-whisper's
transcribe aligns every segment of a window in one pass, and gives each piece its own words on its own time
(docs/DESIGN.md §word-timings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from codes.common.errors import UserError
from codes.runtime.recognition import alignment
from codes.runtime.recognition.asr import NO_ALIGNMENT, WhisperModel, log_mel
from codes.runtime.text.tokenizer import byte_alphabet


@dataclass
class Piece:
    """One piece of audio and the text spoken in it, for align_pieces."""

    waveform: np.ndarray
    sample_rate: int
    text: str
    language: str | None = None  # a Whisper language code; None: detected on its window
    written: str | None = None  # the text as written, where `text` is how it was spoken (see align)


@dataclass
class PackedWindow:
    """Pieces aligned together: which, where each starts in the window (seconds), and the window's alignment."""

    pieces: list[int]
    offsets: list[float]
    window: "AlignedWindow | None"  # the window's alignment, its words on the window's time (None: a piece alone)
    words: list[list[dict]] = field(default_factory=list)  # each piece's, on its own time, within its audio


class Aligner(WhisperModel):
    """`Aligner(folder).align(waveform, sample_rate, text, language)` -> [{"word", "start", "end"}]."""

    REBUILD = "--include-aligner"

    def __init__(self, folder, provider: str = "cpu", threads: int | None = None, check_hashes: bool = True):
        super().__init__(folder, provider, threads, check_hashes)
        self._token_bytes: dict[int, bytes] | None = None  # built on the first alignment

    def _alignment_section(self) -> dict:
        if not self.has_alignment:
            raise UserError(NO_ALIGNMENT.format(folder=self.folder))
        return self.manifest["alignment"]

    def decode_bytes(self, tokens: list[int]) -> str:
        """The tokens' text as openai-whisper's tiktoken decodes it: their bytes joined, then UTF-8 with
        U+FFFD where a character is cut (where the word split looks)."""
        if self._token_bytes is None:
            self._token_bytes = token_bytes_table(self.tokenizer)
        return b"".join(self._token_bytes[token] for token in tokens).decode("utf-8", errors="replace")

    def knows_language(self, language: str) -> bool:
        token = self.tokenizer.token_to_id(f"<|{language}|>")
        return token is not None and token in self.generation["language_ids"]

    def language_token(self, language: str | None) -> int | None:
        """The language token of a Whisper language code; None stays None (detected from the audio)."""
        if language is None:
            return None
        if not self.knows_language(language):
            raise UserError(f"language {language!r} is not one of this aligner's languages; pass a Whisper "
                            "language code (en, zh, ja, ...) or None to detect it")
        return self.tokenizer.token_to_id(f"<|{language}|>")

    def text_tokens(self, text: str, language: str) -> list[int]:
        """The text as the decoder reads it: whitespace collapsed, a leading space where words are spaced
        (as Whisper writes its transcripts), special tokens (which nobody speaks) left out."""
        text = " ".join(text.split())
        if not text:
            return []
        if language not in alignment.UNSPACED_LANGUAGES:
            text = " " + text
        eot = self.generation["eos_token_id"]
        return [t for t in self.tokenizer.encode(text, add_special_tokens=False).ids if t < eot]

    def word_groups(self, tokens: list[int], language: str) -> list[alignment.TimedWord]:
        """The words the tokens make once aligned (split, punctuation merged), without times."""
        eot = self.generation["eos_token_id"]
        words, word_tokens = alignment.split_to_word_tokens(tokens, language, self.decode_bytes, eot)
        merged = alignment.merge_punctuations([alignment.TimedWord(w, t, 0.0, 0.0) for w, t in zip(words, word_tokens)])
        return [word for word in merged if word.tokens]

    def words_of(self, text: str, language: str) -> list[str]:
        """The words `align` reports for `text` in `language`, without audio."""
        groups = self.word_groups(self.text_tokens(text, language), language)
        return [word.word.strip() for word in groups if word.word.strip()]

    def sot_sequence(self, cross: dict, language: str | None) -> tuple[list[int], str]:
        """The decoder's start tokens without <|notimestamps|> (openai-whisper's sot_sequence), the language
        detected on `cross` when None, and the language code the words are split by."""
        no_timestamps = self._alignment_section()["no_timestamps_token_id"]
        init = self.generation["init_tokens"]
        if None not in init:  # an English-only checkpoint has no language slot
            return [t for t in init if t != no_timestamps], "en"
        token = self.language_token(language)
        tokens = self.init_tokens(cross) if token is None else [token if t is None else t for t in init]
        return [t for t in tokens if t != no_timestamps], self.tokenizer.id_to_token(tokens[init.index(None)])[2:-2]

    def aligned_windows(self, waveform: np.ndarray, sample_rate: int, text: str,
                        language: str | None = None) -> list[AlignedWindow]:
        """The text aligned window by window (docs/DESIGN.md §word-timings). A window starts where the last
        one's words ended and reads at most 30 s and as many words as the decoder takes. When the rest of
        the text may not fit it, a first pass (DTW free to end on any token at the window's last frame)
        finds the words its audio holds, and the window ends where the first word it does not hold starts.
        Each window's words are then find_alignment's over its own tokens and frames."""
        section = self._alignment_section()
        wav = self.waveform_16k(waveform, sample_rate, purpose="align")
        rate, hop, window_samples = self.features["sampling_rate"], self.features["hop_length"], self.features["n_samples"]
        content = self._content_frames(wav)  # the clip's mel frames (openai-whisper's content_frames)
        if not any(ch.isalnum() for ch in text):
            return []
        # log_mel_spectrogram(audio, padding=N_SAMPLES), as openai-whisper's transcribe: one peak for the clip
        mel = log_mel(np.concatenate([wav, np.zeros(window_samples, np.float32)]), self.mel_filters,
                      self.features["n_fft"], hop)
        window_frames = window_samples // hop
        windows: list[AlignedWindow] = []
        groups, seek = None, 0
        while groups is None or groups:
            frames = min(window_frames, content - seek)
            segment = np.zeros((mel.shape[0], window_frames), np.float32)  # pad_or_trim: zeros past the audio
            segment[:, :frames] = mel[:, seek : seek + frames]
            cross = self._encode(segment)
            if groups is None:  # the language is detected once, on the first window, as generate() does
                sot, code = self.sot_sequence(cross, language)
                groups = self.word_groups(self.text_tokens(text, code), code)
                if not groups:
                    return []
                prefix = [*sot, section["no_timestamps_token_id"]]
                budget = self.model["max_target_positions"] - len(prefix) - 1
            count, taken = 0, 0
            while count < len(groups) and taken + len(groups[count].tokens) <= budget:
                taken += len(groups[count].tokens)
                count += 1
            if count == 0:
                raise UserError(f"a word of the text takes more than the decoder's {budget} tokens; it cannot be aligned")
            if count < len(groups) or seek + frames < content:
                count, frames = self._first_pass(cross, prefix, groups[:count], frames, len(sot), count < len(groups))
            tokens = [t for group in groups[:count] for t in group.tokens]
            timed = alignment.find_alignment(self.alignment_logits(cross, prefix, tokens), tokens, frames, len(sot),
                                             code, self.decode_bytes, self.generation["eos_token_id"])
            offset = seek * hop / rate
            words = [{"word": w.word.strip(), "start": round(offset + w.start, 3), "end": round(offset + w.end, 3)}
                     for w in alignment.merge_punctuations(timed) if w.word.strip()]
            windows.append(AlignedWindow(seek, frames, tokens, words, code))
            groups, seek = groups[count:], seek + frames
            if groups and content - seek < 2:  # the audio ran out before the text: the rest sits at its end
                end = round(content * hop / rate, 3)
                rest = [{"word": w.word.strip(), "start": end, "end": end} for w in groups if w.word.strip()]
                windows.append(AlignedWindow(seek, 0, [t for g in groups for t in g.tokens], rest, code))
                break
        return windows

    def _content_frames(self, wav_16k: np.ndarray) -> int:
        """A 16 kHz clip's mel frames; fewer than two is too short to align (a one-line UserError)."""
        rate, hop = self.features["sampling_rate"], self.features["hop_length"]
        if len(wav_16k) // hop < 2:
            raise UserError(f"the audio is {len(wav_16k) / rate * 1000:.0f} ms long; aligning words needs at least 20 ms")
        return len(wav_16k) // hop

    def _first_pass(self, cross: dict, prefix: list[int], groups: list[alignment.TimedWord], frames: int,
                    prefix_rows: int, more_text: bool) -> tuple[int, int]:
        """How many of `groups` a window of `frames` mel frames holds (at least one), and the mel frame where
        the first it does not hold starts, where the window ends (its whole length when it holds the rest
        of the text: what audio follows the last word is its pause)."""
        tokens = [t for group in groups for t in group.tokens]
        matrix = alignment.alignment_matrix(self.alignment_logits(cross, prefix, tokens), frames, prefix_rows)
        text_indices, time_indices = alignment.dtw_open_end(-matrix)
        row_starts = alignment.jump_times(text_indices, time_indices)  # row r reads token r (row 0: notimestamps)
        last_row = int(text_indices[-1])
        boundaries = np.cumsum([0] + [len(group.tokens) for group in groups])
        held = int(np.sum(boundaries[1:] <= last_row))  # words whose end (the next row's start) it reached
        if held == 0 or (held == len(groups) and not more_text):
            return max(held, 1), frames
        cut = int(round(row_starts[boundaries[held]] * alignment.TOKENS_PER_SECOND)) * 2
        return held, cut if cut >= 2 else frames

    def align(self, waveform: np.ndarray, sample_rate: int, text: str, language: str | None = None,
              written: str | None = None) -> list[dict]:
        """[{"word", "start", "end"}] for the known `text` spoken in the clip, in seconds from its start, timed
        as openai-whisper's find_alignment (then merge_punctuations) times them, for a clip of any length.

        language: a Whisper language code (words split on spaces, or by character for zh, ja, th, lo, my,
        yue); None detects it on the first window. written: the text as written where `text` is how it was
        spoken (normalize_text's output); spoken words matching written ones one to one are reported as
        written. Text with nothing to align gives []; an empty clip is a UserError. Thread-safe (no state
        but caches), so a server may call it from its executor's threads."""
        windows = self.aligned_windows(waveform, sample_rate, text, language)
        words = [word for window in windows for word in window.words]
        if written is not None and written != text and words:
            code = windows[0].language
            labels = alignment.written_forms([w["word"] for w in words], self.words_of(written, code))
            words = [{**w, "word": label} for w, label in zip(words, labels)]
        return words

    # -- several pieces, packed into shared windows

    def align_pieces(self, pieces: list[Piece]) -> list[list[dict]]:
        """Each piece's words, on its own time (seconds from its start), the pieces packed end to end into
        30 s windows in order (a window takes pieces while their audio fits and their language is one), one
        encoder pass and one alignment pass a window. A piece longer than a window is aligned alone (align);
        a piece with nothing to align gets []."""
        return [words for window in self.packed_windows(pieces) for words in window.words]

    def packed_windows(self, pieces: list[Piece]) -> list[PackedWindow]:
        """align_pieces' windows, in order, with what each read (for the checks against openai-whisper)."""
        window_samples = self.features["n_samples"]
        waves = [self.waveform_16k(p.waveform, p.sample_rate, purpose="align") for p in pieces]
        for wav in waves:
            self._content_frames(wav)
        windows: list[PackedWindow] = []
        start = 0
        while start < len(pieces):
            piece, wav = pieces[start], waves[start]
            if len(wav) > window_samples or not any(ch.isalnum() for ch in piece.text):
                words = self.align(piece.waveform, piece.sample_rate, piece.text, piece.language, piece.written) \
                    if any(ch.isalnum() for ch in piece.text) else []
                windows.append(PackedWindow([start], [0.0], None, [words]))
                start += 1
                continue
            end, total = start, 0
            while (end < len(pieces) and total + len(waves[end]) <= window_samples
                   and pieces[end].language == piece.language and any(ch.isalnum() for ch in pieces[end].text)):
                total += len(waves[end])
                end += 1
            packed = self._pack(pieces, waves, start, end)
            windows.append(packed)
            start += len(packed.pieces)
        return windows

    def _pack(self, pieces: list[Piece], waves: list[np.ndarray], start: int, end: int) -> PackedWindow:
        """pieces[start:end] in one window, or the longest run from `start` whose tokens the decoder takes."""
        section = self._alignment_section()
        rate, hop, window_samples = self.features["sampling_rate"], self.features["hop_length"], self.features["n_samples"]
        wav = np.concatenate(waves[start:end])
        content = len(wav) // hop
        # log_mel_spectrogram(audio, padding=N_SAMPLES), as openai-whisper's transcribe, one window
        mel = log_mel(np.concatenate([wav, np.zeros(window_samples, np.float32)]), self.mel_filters,
                      self.features["n_fft"], hop)
        window_frames = window_samples // hop
        segment = np.zeros((mel.shape[0], window_frames), np.float32)
        segment[:, :content] = mel[:, :content]
        cross = self._encode(segment)
        sot, code = self.sot_sequence(cross, pieces[start].language)
        groups = [self.word_groups(self.text_tokens(p.text, code), code) for p in pieces[start:end]]
        prefix = [*sot, section["no_timestamps_token_id"]]
        budget = self.model["max_target_positions"] - len(prefix) - 1
        counts = np.cumsum([sum(len(g.tokens) for g in piece) for piece in groups])
        fits = int(np.sum(counts <= budget))
        if fits < end - start:  # the text does not fit the decoder: fewer pieces, in a window of their own
            if fits == 0:
                piece = pieces[start]
                return PackedWindow([start], [0.0], None, [self.align(piece.waveform, piece.sample_rate, piece.text,
                                                                     piece.language, piece.written)])
            return self._pack(pieces, waves, start, start + fits)
        tokens = [t for piece in groups for group in piece for t in group.tokens]
        timed = alignment.find_alignment(self.alignment_logits(cross, prefix, tokens), tokens, content, len(sot), code,
                                         self.decode_bytes, self.generation["eos_token_id"])
        offsets = [float(o) for o in np.concatenate([[0], np.cumsum([len(w) for w in waves[start:end]])]) / rate]
        starts = np.concatenate([[0], counts[:-1]])  # each piece's first token in the window
        on_window, words = [], [[] for _ in range(end - start)]
        position = 0
        for word in alignment.merge_punctuations(timed):
            owner = int(np.searchsorted(starts, position, side="right") - 1)
            position += len(word.tokens)
            if not word.word.strip():
                continue
            on_window.append({"word": word.word.strip(), "start": round(word.start, 3), "end": round(word.end, 3)})
            # On the piece's own time, within its audio: DTW over the whole window may draw a word of one piece
            # onto its neighbour's audio (random weights do; a trained model hardly), which says only "at its edge".
            length = offsets[owner + 1] - offsets[owner]
            words[owner].append({"word": word.word.strip(),
                                 "start": round(min(max(word.start - offsets[owner], 0.0), length), 3),
                                 "end": round(min(max(word.end - offsets[owner], 0.0), length), 3)})
        for i, piece in enumerate(pieces[start:end]):
            if piece.written is not None and piece.written != piece.text and words[i]:
                labels = alignment.written_forms([w["word"] for w in words[i]], self.words_of(piece.written, code))
                words[i] = [{**w, "word": label} for w, label in zip(words[i], labels)]
        window = AlignedWindow(0, content, tokens, on_window, code)
        return PackedWindow(list(range(start, end)), offsets[:-1], window, words)


@dataclass
class AlignedWindow:
    """One window of an alignment: where it starts, how much audio and which tokens it read, its words."""
    seek: int  # its first mel frame (10 ms) in the clip
    num_frames: int  # the mel frames its alignment reads (find_alignment's num_frames)
    tokens: list[int]  # its text tokens
    words: list[dict]  # [{"word", "start", "end"}], seconds from the clip's start
    language: str  # the Whisper language code its words were split by


def token_bytes_table(tokenizer) -> dict[int, bytes]:
    """Each token id's bytes: byte-level BPE pieces through GPT-2's byte alphabet, added tokens as their text."""
    to_byte = {char: byte for byte, char in enumerate(byte_alphabet())}
    added = {token_id: token.content for token_id, token in tokenizer.get_added_tokens_decoder().items()}
    return {token_id: added[token_id].encode() if token_id in added else bytes(to_byte[c] for c in piece)
            for piece, token_id in tokenizer.get_vocab(with_added_tokens=True).items()}
