"""normalize_text (codes/runtime/text/normalize.py) against upstream's omnivoice.utils.text.normalize_text, string for
string: numbers, ordinals, dates, times, currency, percentages, phone numbers and units in English and Chinese,
integers in other languages, with non-verbal tags, CMU phones and pinyin held out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omnivoice.utils.text import normalize_text as upstream_normalize_text

from codes.runtime.text.normalize import normalization_language, normalize_text

REPO_ROOT = Path(__file__).resolve().parents[2]

CASES = [
 ("I paid $5.50 on Jan. 3rd, 2024 at 10:30am for 25% of 3 kg.", "en"),
 ("Call 555-123-4567 or +1 (800) 555-0199 before 9:45 PM on 12/25/2023.", "en"),
 ("He finished 1st, she 2nd; the 21st century; 3.14159 and -7 degrees, 1,000,000 people.", None),
 ("It costs €20, £3.50, ¥1000 and 50 km/h, 2.5kg, 100ml [laughter] ok.", "English"),
 ("He plays the [B EY1 S] guitar, 2 times, [sigh] at 5pm.", "en"),
 ("今天是2024年3月5日，我花了199元，温度-3.5℃，占比45%。", "zh"),
 ("电话13812345678，时间下午3:30，第1名 [laughter] 呃 哪儿 這個。", None),
 ("这批货物打ZHE2出售后他严重SHE2本了，价格是1299元。", "Chinese"),
 ("Ich habe 25 Äpfel und 3 Birnen, am 3. Mai 2024.", "de"),
 ("J'ai 42 ans et 1999 euros [laughter].", "fr"),
 ("Tengo 7 gatos y 1000 perros.", "es"),
 ("У меня 21 яблоко.", "ru"),
 ("私は25歳です。", "ja"),
 ("Mam 3 koty i 12 psów.", "Polish"),
 ("unknown 12 language", "xx"),
 ("   ", "en"),
 ("", None),
 ("[laughter]", "en"),
 ("12 [B EY1 S][sigh] 13", "en"),
]


@pytest.mark.parametrize("text, language", CASES)
def test_normalized_text_equals_upstreams(text, language):
    assert normalize_text(text, language) == upstream_normalize_text(text, language)


def test_normalization_changes_what_it_should_and_keeps_the_controls():
    assert normalize_text("I have 2345 apples [laughter].", "en") == "I have twenty three forty five apples [laughter]."
    assert "ZHE2" in normalize_text("打ZHE2出售，第3次。", "zh") and "三" in normalize_text("打ZHE2出售，第3次。", "zh")
    assert normalize_text("Ich habe 25 Äpfel.", "German") == "Ich habe fünfundzwanzig Äpfel."


@pytest.mark.parametrize("language, text, code", [
    ("en", "x", "en"), ("Chinese", "x", "zh"), (None, "你好", "zh"), (None, "hello", "en"), ("none", "你好", "zh"),
    ("Japanese", "x", "ja"), ("klingon", "x", "klingon"), (" DE ", "x", "de"),
])
def test_the_language_is_picked_as_upstream_does(language, text, code):
    assert normalization_language(language, text) == code


def test_without_the_library_asking_for_normalization_is_one_line_and_nothing_else_breaks():
    script = (
        "import sys\n"
        "sys.modules['tn'] = None\n"  # as if WeTextProcessing could not be imported
        "from codes.common.errors import UserError\n"
        "from codes.runtime.text.normalize import normalize_text\n"
        "assert normalize_text('Ich habe 3 Äpfel.', 'de') == 'Ich habe drei Äpfel.'\n"
        "try:\n"
        "    normalize_text('I have 3 apples.', 'en')\n"
        "except UserError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    message = done.stdout.strip()
    assert "\n" not in message
    assert message.startswith("text normalization needs WeTextProcessing (and pynini), which cannot be imported")
    assert "pip install -r requirements-runtime.txt" in message
