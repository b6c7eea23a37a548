"""Word timings by forced alignment, as openai-whisper's `whisper.timing.find_alignment` computes them. No torch.

The decoder reads the known text over one window of audio; its alignment heads' cross-attention says which
audio frames each token attends to. As `find_alignment` does: a softmax over the window's frames, each
head standardized over the tokens, a median filter of width 7 along time, the heads averaged, the
sot_sequence rows and the last row dropped, then DTW over the negated matrix; a jump in the token index
marks a token's start, at 50 attention frames a second. Words come from the tokens as openai-whisper's
tokenizer splits them (`split_to_word_tokens`) and punctuation joins its word as `merge_punctuations`
does. Each function keeps openai-whisper's granularity and tie rules, so each is tested against its twin
(tests/runtime/test_alignment.py); `codes/runtime/recognition/asr.py` runs the graphs and the windows.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TOKENS_PER_SECOND = 50  # attention frames: 1500 per 30 s window, each two 10 ms mel frames
MEDIAN_FILTER_WIDTH = 7
PREPEND_PUNCTUATIONS = "\"'“¿([{-"  # openai-whisper transcribe()'s defaults
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
# Languages written without spaces: split at every whole Unicode character, not at spaces.
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
REPLACEMENT_CHAR = "\ufffd"


@dataclass
class TimedWord:
    word: str  # as decoded, with its leading space
    tokens: list[int]
    start: float  # seconds from the window's start
    end: float


# ---------------------------------------------------------------- the attention matrix

def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=axis, keepdims=True))
    return (shifted / shifted.sum(axis=axis, keepdims=True)).astype(np.float32)


def standardize_over_tokens(weights: np.ndarray) -> np.ndarray:
    """Each head's weights [heads, tokens, frames] less their mean over the tokens, over their std
    (torch.std_mean(dim=-2, unbiased=False))."""
    mean = weights.mean(axis=-2, keepdims=True, dtype=np.float32)
    std = weights.std(axis=-2, keepdims=True, dtype=np.float32)
    return ((weights - mean) / std).astype(np.float32)


def median_filter(x: np.ndarray, width: int = MEDIAN_FILTER_WIDTH) -> np.ndarray:
    """openai-whisper's median_filter: the median of each `width` neighbours along the last axis, the ends
    reflect-padded (torch's F.pad reflect: the edge sample is not repeated); too short an axis is kept."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    if width <= 0 or width % 2 != 1:
        raise ValueError("the median filter's width must be an odd number")
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.sort(windows, axis=-1)[..., pad]


def alignment_matrix(qk: np.ndarray, num_frames: int, prefix_rows: int, medfilt_width: int = MEDIAN_FILTER_WIDTH,
                     qk_scale: float = 1.0) -> np.ndarray:
    """find_alignment's matrix [tokens, frames] from the alignment heads' cross-attention logits
    [heads, sequence, 1500]: the window's num_frames // 2 frames, softmax, standardized, median-filtered,
    the heads averaged, then the sot_sequence's `prefix_rows` rows and the last (<|endoftext|>) dropped."""
    weights = softmax(qk[:, :, : num_frames // 2].astype(np.float32) * np.float32(qk_scale))
    weights = median_filter(standardize_over_tokens(weights), medfilt_width)
    return weights.mean(axis=0, dtype=np.float32)[prefix_rows:-1]


# ---------------------------------------------------------------- DTW (openai-whisper's dtw_cpu)

def dtw_trace(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """dtw_cpu's cost and trace matrices [N + 1, M + 1] for the cost x [N, M], in float32. Each cell takes
    the diagonal only when strictly below both others, then the one above when strictly below both, else
    the one to its left. The cells of one anti-diagonal depend only on earlier ones, so each is one step."""
    rows, cols = x.shape
    x = x.astype(np.float32)
    cost = np.full((rows + 1, cols + 1), np.inf, np.float32)
    cost[0, 0] = 0.0
    trace = np.full((rows + 1, cols + 1), -1, np.int8)
    for diagonal in range(2, rows + cols + 1):
        i = np.arange(max(1, diagonal - cols), min(rows, diagonal - 1) + 1)
        j = diagonal - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        t = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2)).astype(np.int8)
        cost[i, j] = x[i - 1, j - 1] + np.choose(t, (c0, c1, c2))
        trace[i, j] = t
    return cost, trace


def backtrace(trace: np.ndarray, i: int | None = None, j: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """openai-whisper's backtrace from cell (i, j) (default: the last): the path's token and time indices."""
    trace = trace.copy()
    i = trace.shape[0] - 1 if i is None else i
    j = trace.shape[1] - 1 if j is None else j
    trace[0, :] = 2
    trace[:, 0] = 1
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        step = trace[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        elif step == 2:
            j -= 1
        else:
            raise ValueError("unexpected DTW trace value")
    text_indices, time_indices = np.array(path[::-1], dtype=np.int64).T
    return text_indices, time_indices


def dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The path from the first token and frame to the last, as dtw_cpu."""
    return backtrace(dtw_trace(x)[1])


def dtw_open_end(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same path, but ending at the last frame on whichever token costs least there: how far into the
    text the window's audio reaches (the first pass over a window that does not hold the whole text)."""
    cost, trace = dtw_trace(x)
    end_row = 1 + int(np.argmin(cost[1:, -1]))
    return backtrace(trace, end_row, cost.shape[1] - 1)


def jump_times(text_indices: np.ndarray, time_indices: np.ndarray) -> np.ndarray:
    """When each token row starts along the path, in seconds."""
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    return time_indices[jumps] / TOKENS_PER_SECOND


# ---------------------------------------------------------------- words (openai-whisper's Tokenizer)

def split_tokens_on_unicode(tokens: list[int], decode: Callable[[list[int]], str]) -> tuple[list[str], list[list[int]]]:
    """Tokens grouped at every point where they decode to whole Unicode characters."""
    decoded_full = decode(tokens)
    words, word_tokens, current = [], [], []
    offset = 0
    for token in tokens:
        current.append(token)
        decoded = decode(current)
        if REPLACEMENT_CHAR not in decoded or decoded_full[offset + decoded.index(REPLACEMENT_CHAR)] == REPLACEMENT_CHAR:
            words.append(decoded)
            word_tokens.append(current)
            current = []
            offset += len(decoded)
    return words, word_tokens


def split_tokens_on_spaces(tokens: list[int], decode: Callable[[list[int]], str],
                           eot: int) -> tuple[list[str], list[list[int]]]:
    """Unicode groups joined into words: a new word at a leading space, a special token or punctuation."""
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for subword, subword_tokens in zip(*split_tokens_on_unicode(tokens, decode)):
        special = subword_tokens[0] >= eot
        with_space = subword.startswith(" ")
        punctuation = subword.strip() in string.punctuation  # a substring test, as openai-whisper's
        if special or with_space or punctuation or not words:
            words.append(subword)
            word_tokens.append(list(subword_tokens))
        else:
            words[-1] += subword
            word_tokens[-1].extend(subword_tokens)
    return words, word_tokens


def split_to_word_tokens(tokens: list[int], language: str, decode: Callable[[list[int]], str],
                         eot: int) -> tuple[list[str], list[list[int]]]:
    if language in UNSPACED_LANGUAGES:
        return split_tokens_on_unicode(tokens, decode)
    return split_tokens_on_spaces(tokens, decode, eot)


def word_timings(words: list[str], word_tokens: list[list[int]], text_indices: np.ndarray,
                 time_indices: np.ndarray) -> list[TimedWord]:
    """find_alignment's words: each starts when its first token's row does and ends when the next word's
    does; the last split word (<|endoftext|>) only closes the one before it."""
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    times = jump_times(text_indices, time_indices)
    starts, ends = times[boundaries[:-1]], times[boundaries[1:]]
    return [TimedWord(word, list(tokens), float(start), float(end))
            for word, tokens, start, end in zip(words, word_tokens, starts, ends)]


def merge_punctuations(alignment: list[TimedWord], prepended: str = PREPEND_PUNCTUATIONS,
                       appended: str = APPEND_PUNCTUATIONS) -> list[TimedWord]:
    """openai-whisper's merge_punctuations on a copy: an opening mark joins the word after it, a closing
    one the word before; the mark's own entry is left empty (word "", no tokens), as there."""
    words = [TimedWord(w.word, list(w.tokens), w.start, w.end) for w in alignment]
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        previous, following = words[i], words[j]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            following.word = previous.word + following.word
            following.tokens = previous.tokens + following.tokens
            previous.word, previous.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        previous, following = words[i], words[j]
        if not previous.word.endswith(" ") and following.word in appended:
            previous.word = previous.word + following.word
            previous.tokens = previous.tokens + following.tokens
            following.word, following.tokens = "", []
        else:
            i = j
        j += 1
    return words


def find_alignment(qk: np.ndarray, text_tokens: list[int], num_frames: int, prefix_rows: int, language: str,
                   decode: Callable[[list[int]], str], eot: int) -> list[TimedWord]:
    """find_alignment's words and times over one window, from the logits of the sequence
    [*sot_sequence, <|notimestamps|>, *text_tokens, <|endoftext|>] (prefix_rows: the sot_sequence's length)."""
    if not text_tokens:
        return []
    text_indices, time_indices = dtw(-alignment_matrix(qk, num_frames, prefix_rows))
    words, word_tokens = split_to_word_tokens([*text_tokens, eot], language, decode, eot)
    return word_timings(words, word_tokens, text_indices, time_indices)


# ---------------------------------------------------------------- written words for spoken ones

def word_key(word: str) -> str:
    """What two spellings of one word share: its letters and digits, lower-cased."""
    return "".join(ch for ch in word.casefold() if ch.isalnum())


def written_forms(spoken: list[str], written: list[str]) -> list[str]:
    """For each spoken word, the written word it stands for where the two texts match one to one (the same
    word, or a run of words replaced by as many others: "Dr." for "Doctor"), else the spoken word itself
    (a number written "2345" and spoken in four words keeps the four)."""
    labels = list(spoken)
    matcher = difflib.SequenceMatcher(None, [word_key(w) for w in spoken], [word_key(w) for w in written],
                                      autojunk=False)
    for tag, s1, s2, w1, w2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and s2 - s1 == w2 - w1):
            labels[s1:s2] = written[w1:w2]
    return labels
