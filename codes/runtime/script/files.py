"""The files a spoken script makes: the mix, its captions and each speaker's stem, checked before any work
and each written whole. Errors name each file by the label its caller gives it (inference.py: its flags)."""

from __future__ import annotations

from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import atomic_path
from codes.runtime.audio.outputs import check_audio_output_path, check_output_path, write_audio
from codes.runtime.script.subtitles import caption_text
from codes.runtime.script.timeline import RenderedScript

CAPTION_SUFFIXES = {".srt": "srt", ".vtt": "vtt"}
# How check_outputs names each file in its errors, unless the caller names them its own way.
LABELS = {"output": "the output", "captions": "the captions", "stems": "the stems folder"}


def stem_paths(stems: Path, speakers, output: Path) -> dict[str, Path]:
    """Each speaker's stem file: STEMS/<name> with the mix's extension (names are plain file names)."""
    return {name: stems / f"{name}{output.suffix}" for name in speakers}


def check_outputs(output: Path, captions: Path | None = None, stems: Path | None = None, speakers=(),
                  script: Path | None = None, labels: dict[str, str] = LABELS) -> None:
    """Fail before any compute where an output cannot be written, would be the script it is made from, or two
    would be one file. labels: how the errors name the output, the captions and the stems folder."""
    out, cap, stem = labels["output"], labels["captions"], labels["stems"]
    check_audio_output_path(output)
    for label, path in ((out, output), (cap, captions)):
        if script is not None and path is not None and path.resolve() == Path(script).resolve():
            raise UserError(f"{label} {path} is the script itself; write it to another file")
    if captions is not None:
        check_output_path(captions, "captions")
        if captions.suffix.lower() not in CAPTION_SUFFIXES:
            raise UserError(f"{cap} {captions} needs .srt or .vtt, got {captions.suffix or 'no extension'!r}")
        if captions.resolve() == output.resolve():
            raise UserError(f"{cap} {captions} is {out} too; give the captions their own file")
    if stems is None:
        return
    if stems.exists() and not stems.is_dir():
        raise UserError(f"{stem} {stems} is a file; give a folder (made if missing)")
    check_output_path(stems / "stem" if stems.is_dir() else stems, "stems")
    for name, path in stem_paths(stems, speakers, output).items():
        if path.resolve() in {output.resolve(), captions.resolve() if captions else None}:
            raise UserError(f"speaker {name}'s stem would be {path}, which is another output; "
                            f"give {stem} another folder")


def write_captions(path: Path, captions, sample_rate: int) -> None:
    """The captions as the file's extension says (.srt, .vtt), written whole."""
    with atomic_path(path) as tmp:
        tmp.write_text(caption_text(captions, CAPTION_SUFFIXES[path.suffix.lower()], sample_rate), encoding="utf-8")


def write_outputs(rendered: RenderedScript, output: Path, captions: Path | None = None, stems: Path | None = None,
                  float_wav: bool = False, part_folder: Path | None = None) -> list[Path]:
    """The mix, then the captions and each speaker's stem, each written whole; returns what was written.
    part_folder: where the mix is written before it is renamed into place (a ledger's folder)."""
    written = [output]
    write_audio(output, rendered.audio, rendered.sample_rate, float_wav, part_folder)
    if captions is not None:
        write_captions(captions, rendered.captions, rendered.sample_rate)
        written.append(captions)
    if stems is not None:
        stems.mkdir(exist_ok=True)
        for name, path in stem_paths(stems, rendered.stems, output).items():
            write_audio(path, rendered.stems[name], rendered.sample_rate, float_wav)
            written.append(path)
    return written
