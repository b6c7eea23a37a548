"""Text normalization as upstream's `normalize_text=True` does it: numbers, dates, currency and the like
become words before synthesis. No torch.

Chinese and English go through WeTextProcessing's prebuilt grammars (pynini); any other language gets
num2words on its bare integers. OmniVoice's inline controls are held out and put back verbatim:
`[...]` spans (non-verbal tags such as [laughter], CMU phones such as [B EY1 S]) and, in Chinese,
uppercase pinyin with a tone digit (HAO3), whose digit would otherwise be read as a number.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable

from codes.common.errors import UserError
from codes.runtime.text.voice_design import LANGUAGE_IDS, LANGUAGE_NAME_TO_ID

logger = logging.getLogger(__name__)

BRACKETED = re.compile(r"\[[^\[\]]*\]")
PINYIN_WITH_TONE = re.compile(r"[A-Z]+[1-5]")
HAN = re.compile(r"[\u4e00-\u9fff]")
BARE_INTEGER = re.compile(r"\d+")

INSTALL_HINT = ("text normalization needs {what}, which cannot be imported here ({cause}); install it with "
                "pip install -r requirements-runtime.txt (on macOS arm64 first: conda install -c conda-forge pynini)")

# pynini's FST objects are not documented as safe to share between threads; the server normalizes
# from its executor's threads, so one call at a time (a sentence takes milliseconds).
_lock = threading.Lock()


def normalization_language(language: str | None, text: str) -> str:
    """The language code normalization runs for: "zh", "en" or another id, as upstream picks it. An unknown
    name passes through as if it were an id; None (or "none") is Chinese when the text holds Han
    characters, else English."""
    if language is not None:
        code = language.strip().lower()
        if code and code != "none":
            if code in LANGUAGE_IDS or code not in LANGUAGE_NAME_TO_ID:
                return code
            return LANGUAGE_NAME_TO_ID[code]
    return "zh" if HAN.search(text) else "en"


def normalize_text(text: str, language: str | None = None) -> str:
    """`text` with its numbers, dates, times, currency, units and symbols in words, controls untouched.

    language: an id or a name (what `generate` resolved); None guesses Chinese or English from the script.
    A missing library is a UserError that says how to install it."""
    if not text or not text.strip():
        return text
    code = normalization_language(language, text)
    if code in ("zh", "en"):
        rewrite = _wetext_normalizer(code).normalize
    else:
        rewrite = functools.partial(_spell_integers, code=code, num2words=_num2words())
    with _lock:
        return _around_controls(text, rewrite, pinyin=code == "zh")


def without_tags(text: str) -> str:
    """The text with its `[...]` spans (non-verbal tags, CMU phones) taken out: what is spoken as words."""
    return " ".join(BRACKETED.sub(" ", text).split())


def _around_controls(text: str, rewrite: Callable[[str], str], pinyin: bool) -> str:
    """`rewrite` applied to the stretches between protected spans; the spans (merged where they
    touch or overlap) are kept as they are."""
    spans = [m.span() for m in BRACKETED.finditer(text)]
    if pinyin:
        spans += [m.span() for m in PINYIN_WITH_TONE.finditer(text)]
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces, position = [], 0
    for start, end in merged:
        if start > position:
            pieces.append(_rewrite_stretch(rewrite, text[position:start]))
        pieces.append(text[start:end])
        position = end
    if position < len(text):
        pieces.append(_rewrite_stretch(rewrite, text[position:]))
    return "".join(pieces)


def _rewrite_stretch(rewrite: Callable[[str], str], stretch: str) -> str:
    """One stretch rewritten, its outer whitespace kept: the normalizers strip it, which would glue a word
    to the tag beside it. A stretch the grammar fails on stays as it was."""
    core = stretch.strip()
    if not core:
        return stretch
    lead, trail = stretch[: len(stretch) - len(stretch.lstrip())], stretch[len(stretch.rstrip()):]
    try:
        core = rewrite(core)
    except Exception as exc:  # a grammar's failure on odd input must not fail the request
        logger.warning("text normalization failed on a stretch (%s); kept as written", type(exc).__name__)
        return stretch
    return lead + core + trail


def _spell_integers(stretch: str, code: str, num2words) -> str:
    def spelled(match: re.Match) -> str:
        try:
            return num2words(int(match.group()), lang=code)
        except Exception:  # a language or number num2words does not know stays in digits
            return match.group()

    return BARE_INTEGER.sub(spelled, stretch)


@functools.lru_cache(maxsize=None)
def _wetext_normalizer(code: str):
    """WeTextProcessing's normalizer for zh or en, loaded once per process (its grammars take a while)."""
    try:
        if code == "zh":
            from tn.chinese.normalizer import Normalizer
        else:
            from tn.english.normalizer import Normalizer
    except ImportError as exc:
        raise UserError(INSTALL_HINT.format(what="WeTextProcessing (and pynini)", cause=exc)) from None
    logging.getLogger("WETEXT").setLevel(logging.WARNING)  # it logs three INFO lines per load
    return Normalizer()


@functools.lru_cache(maxsize=None)
def _num2words():
    try:
        from num2words import num2words
    except ImportError as exc:
        raise UserError(INSTALL_HINT.format(what="num2words", cause=exc)) from None
    return num2words


def check_available() -> None:
    """UserError now, not at the first request, when normalization cannot run (a server's --normalize-text)."""
    _wetext_normalizer("zh")
    _wetext_normalizer("en")
    _num2words()
