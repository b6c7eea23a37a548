"""What every script parser starts from: the file's text, and the declared speakers' names.

Scripts come as editors write them: UTF-8 with or without a BOM, UTF-16 with one (Windows' "Unicode"),
CRLF or LF. Anything else (another encoding, binary junk) is refused in one line, never guessed at.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable

from codes.common.errors import UserError

MAX_NAME_CHARS = 64
# Letters, digits, spaces and a few marks names carry (O'Neil, Dr. Who, Jean-Luc), so a name is a safe file
# name for its stem and cannot hold the "=" of --speaker or the ":" of a line's prefix.
_NAME = re.compile(r"[^\W_][\w .'-]*")
# Control characters text never holds (tab, newlines and form feed are text).
_BINARY = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
# A line's speaker prefix: "Name:", or a subtitle's ">> Name:" / "- Name:".
_PREFIX = re.compile(r"\s*(?:>>\s*|-\s+)?(?P<name>[^:<>{}\[\]]{1,%d}?)\s*:\s*(?P<rest>.*)" % MAX_NAME_CHARS, re.S)
_LOOKS_LIKE_A_NAME = re.compile(r"[A-Z][\w'.-]*(?: [A-Z][\w'.-]*){0,2}")


def decode(data: bytes | str, source: str) -> str:
    """A script's text from its bytes, BOM and CRLF gone."""
    if isinstance(data, str):
        text = data.lstrip("\ufeff")
    else:
        for bom, encoding in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                              (codecs.BOM_UTF16_BE, "utf-16-be")):
            if data.startswith(bom):
                data, chosen = data[len(bom):], encoding
                break
        else:
            chosen = "utf-8"
        try:
            text = data.decode(chosen)
        except UnicodeDecodeError as exc:
            line = data[:exc.start].count(b"\n") + 1
            raise UserError(f"{source} is not {chosen.upper()} text (a byte it cannot read on line {line}); "
                            "save it as UTF-8") from None
    junk = _BINARY.search(text)
    if junk:
        line = text[:junk.start()].count("\n") + 1
        raise UserError(f"{source} holds binary data (control character {ord(junk.group()):#04x} on line {line}); "
                        "give a text script, SRT, WebVTT or JSONL file")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def check_name(name: str) -> str:
    """A speaker's name, refused where it could not be a file name or a line's prefix."""
    name = name.strip()
    if not (0 < len(name) <= MAX_NAME_CHARS and _NAME.fullmatch(name)):
        raise UserError(f"speaker name {name!r} is not a name: use letters, digits, spaces and . ' - "
                        f"(at most {MAX_NAME_CHARS} characters, starting with a letter or digit)")
    return name


class SpeakerNames:
    """The declared speakers, found case-insensitively (scripts write ALICE for Alice) and given back as declared."""

    def __init__(self, names: Iterable[str] = ()):
        self.by_key: dict[str, str] = {}
        for name in names:
            name = check_name(name)
            key = name.casefold()
            if key in self.by_key:
                raise UserError(f"speakers {self.by_key[key]!r} and {name!r} differ only in case; give them distinct names")
            self.by_key[key] = name

    def find(self, name: str) -> str | None:
        return self.by_key.get(name.strip().casefold())

    def declared(self, name: str, where: str) -> str:
        """A name a script gives (a VTT voice, a JSONL "speaker"), which must be declared."""
        found = self.find(name)
        if found is None:
            known = ", ".join(self.by_key.values()) or "none"
            raise UserError(f"{where}: unknown speaker {name.strip()!r} (declared: {known}); "
                            f"declare it with --speaker {name.strip()}=VOICE")
        return found

    def prefix(self, line: str) -> tuple[str, str] | None:
        """(speaker, rest of the line) where the line begins with a declared name and a colon, else None."""
        match = _PREFIX.fullmatch(line)
        if match:
            found = self.find(match.group("name"))
            if found is not None:
                return found, match.group("rest").strip()
        return None

    def stray_prefix(self, line: str) -> str | None:
        """A name-like word before a colon that is no declared speaker (a typo?), to warn about, else None."""
        match = _PREFIX.fullmatch(line)
        if match and self.by_key and _LOOKS_LIKE_A_NAME.fullmatch(match.group("name")):
            return match.group("name")
        return None
