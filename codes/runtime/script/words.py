"""Word-level captions (issue 44): each caption's words, timed by forced alignment of its own piece's audio
with the text that piece spoke (docs/scripts.md, "Captions and stems"; docs/DESIGN.md §word-timings). The
pieces are aligned together, packed end to end into shared 30 s windows (tts.align_pieces), so captions pay
about one window per 30 s of speech, not one per cue.

    align_captions(tts, plan, rendered) -> list[Caption]
        rendered.captions (a finished RenderedScript's, from render_plan or Timeline(plan).finish()), each with
        Caption.words filled: [{"word", "start", "end"}], start and end in samples on the track, as the
        caption's own start and end. A piece whose text has nothing to align (only tags or punctuation), or
        whose audio post-processing left empty, gets words == (), never an error.
    caption_words(tts, caption, wav, offset, spoken, language) -> Caption
        the same for one caption, as a driver places its piece (Timeline.add: wav as decoded, at offset), or for
        a single utterance (utterance_caption, offset 0).

What is aligned: the piece's decoded audio (not the mix, where trimmed or mixed cues and a pad over the cue
before sound too) over its speech span, caption.start to caption.end: the 0.1 s pads around it are silence
this runtime adds, where no word is heard, and openai-whisper's DTW starts its first word on the first frame
it is given. The text is what the piece spoke (its settled Request's: normalized where normalize_text ran),
with the segment's text as written, so a word the normalizer rewrote one to one comes back as written; the
language is the segment's resolved one (None: Whisper detects it).

Pure apart from the aligner (tts.align_pieces): a server calls it in an executor thread, after
tts.check_word_timings() has refused a build without word timings before any work.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from codes.runtime.request import Request
from codes.runtime.script.plan import Piece, ScriptPlan, settle_piece
from codes.runtime.script.timeline import Caption, RenderedScript


def spoken_request(tts, plan: ScriptPlan, piece: Piece) -> Request:
    """The piece's settled text and language: its plan's Request, or, for a made speaker's later piece (settled
    only once its reference existed), the same settle without the voice, which changes neither."""
    if piece.request is not None:
        return piece.request
    return settle_piece(tts, plan.defaults, piece.segment, None, piece.instruct, plan.source)


def _speech(caption: Caption, wav: np.ndarray, offset: int) -> np.ndarray:
    """The piece's audio over the caption's speech span (its pads, silence this runtime adds, left out)."""
    return np.asarray(wav, np.float32)[caption.start - offset:caption.end - offset]


def _with_words(caption: Caption, timed: list[dict], sample_rate: int) -> Caption:
    """The caption with its aligned words on the track; a time rounded past the speech's end is its end."""
    def on_track(seconds: float) -> int:
        return min(caption.end, caption.start + round(seconds * sample_rate))

    return replace(caption, words=tuple({"word": w["word"], "start": on_track(w["start"]), "end": on_track(w["end"])}
                                        for w in timed))


def caption_words(tts, caption: Caption, wav: np.ndarray, offset: int, spoken: str, language: str | None,
                  sample_rate: int = 24000) -> Caption:
    """The caption with its words, aligned on wav (its piece's audio, placed at `offset` on the track) between
    caption.start and caption.end."""
    if caption.end <= caption.start:
        return replace(caption, words=())
    timed = tts.align_words(_speech(caption, wav, offset), spoken, language, written=caption.text)
    return _with_words(caption, timed, sample_rate)


def align_captions(tts, plan: ScriptPlan, rendered: RenderedScript) -> list[Caption]:
    """Every caption of a finished track with its words (see the module's docstring), the pieces aligned
    together in shared windows."""
    spans = [(piece, caption, offset, wav) for piece, caption, offset, wav
             in zip(plan.pieces, rendered.captions, rendered.offsets, rendered.pieces, strict=True)]
    spoken = [(spoken_request(tts, plan, piece), caption, offset, wav) for piece, caption, offset, wav in spans]
    timed = iter(tts.align_pieces([(_speech(caption, wav, offset), request.text, request.lang, caption.text)
                                   for request, caption, offset, wav in spoken if caption.end > caption.start]))
    return [_with_words(caption, next(timed), rendered.sample_rate) if caption.end > caption.start
            else replace(caption, words=()) for _, caption, _, _ in spoken]
