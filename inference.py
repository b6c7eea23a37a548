#!/usr/bin/env python3
"""Speak text with an omnivoice-onnx build: ONNX Runtime, numpy, soundfile and a tokenizer. No torch.

  python inference.py --model_dir models/omnivoice-cpu --text "Hello there." --output hello.wav
  python inference.py --model_dir DIR --text "..." --ref_audio me.wav --ref_text "What I said." --output out.wav
  python inference.py --model_dir DIR --text "..." --ref_audio me.wav --output out.wav   # a build with --include-asr
  python inference.py --model_dir DIR --jsonl lines.jsonl --output out_folder/
  python inference.py --model_dir DIR --script dialogue.txt --speaker Alice=alice.npz --speaker "Bob=instruct:male" \
      --output dialogue.wav --captions dialogue.srt          # or an .srt/.vtt dubbed cue by cue (docs/scripts.md)
  python inference.py --model_dir DIR --text "..." --output out.wav --captions out.vtt --caption_words   # word timings
  python inference.py --model_dir DIR --script book.epub --output book.m4b --chapters chapters/ \
      --read_along read-along.epub --acx                    # an audiobook (docs/books.md)
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from pathlib import Path

from codes.common.errors import UserError, run_cli
from codes.runtime.contract.settings import add_generation_flags, settings_from_flags

# How a script's files are named in its errors: by the flags that give them.
OUTPUT_FLAGS = {"output": "--output", "captions": "--captions", "stems": "--stems"}
# A book's own flags (valued, and switches): refused with anything but a book.
BOOK_FLAGS = ("paragraph_gap", "chapter_gap", "dialogue_voice", "skip", "chapters", "chapter_format", "read_along",
              "loudness", "true_peak")
BOOK_SWITCHES = ("no_titles", "read_toc", "read_page_numbers", "read_footnotes", "acx")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", type=Path,
                   help="a build folder from optimize.py (default: models/omnivoice-cpu, what --device cpu writes)")
    p.add_argument("--higgs_dir", type=Path,
                   help="a codec folder (audio_tokenizer/) or a build holding one (default: the model folder's, "
                        "else models/higgs-fp16, what --higgs-only writes)")
    p.add_argument("--asr_dir", type=Path,
                   help="a recogniser folder (asr/) or a build holding one, to transcribe a --ref_audio given without "
                        "--ref_text (default: the model folder's, if it has one)")
    p.add_argument("--backbone", type=Path,
                   help="a bidirectional backbone graph (.onnx) to use instead of the model folder's")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", help="the text to speak")
    what.add_argument("--text_file", type=Path, help="one utterance per line; --output is then a folder")
    what.add_argument("--jsonl", type=Path, help='one {"text", "output"?, "language"?, "instruct"?, "duration"?, '
                                                 '"speed"?} per line, or upstream\'s test list (id, ref_audio, '
                                                 'ref_text, language_id, ...); --output is then a folder')
    what.add_argument("--script", type=Path, help="a script: a dialogue (.txt), subtitles (.srt, .vtt) or segments "
                                                  "(.jsonl), spoken into one track (docs/scripts.md); or a book "
                                                  "(.epub, .md, .html; plain text with --script_format book) read "
                                                  "into a chaptered audiobook (docs/books.md)")
    script = p.add_argument_group("scripts (--script)")
    script.add_argument("--script_format", choices=("text", "srt", "vtt", "jsonl", "epub", "markdown", "html", "book"),
                        help="the script's format (default: by extension; anything else is a text script); book: "
                             "plain text read as a book, chapters at its chapter lines")
    script.add_argument("--speaker", action="append", metavar="NAME=VOICE",
                        help="a speaker and its voice: a voice file (.npz, .pt), a clip (.wav, ... or clip:PATH, "
                             "|transcript optional), instruct:<attributes> or auto; repeat for each; the first "
                             "speaks unmarked lines (none: one auto voice)")
    script.add_argument("--gap", type=float, help="seconds of silence between two speakers' turns (default 0; "
                                                  "each piece has 0.1 s of pad on each side already)")
    script.add_argument("--overlap", choices=("error", "trim", "mix"),
                        help="overlapping cues: refused (default), the earlier ends where the later starts, or both "
                             "spoken over each other")
    script.add_argument("--stems", type=Path, help="also write one track per speaker into this folder (made if missing)")
    script.add_argument("--max_batch", type=int, help="segments sharing each decoding step (default: 1 on the CPU, "
                                                      "where a shared step costs its padding, 8 on CUDA)")
    script.add_argument("--no_ledger", action="store_true",
                        help="keep no ledger beside --output (default: OUTPUT.ledger/ keeps each segment spoken, so "
                             "a re-run speaks only the segments that changed, and a killed run resumes)")
    script.add_argument("--ray", action="store_true", help="speak the segments on Ray actors, on a local Ray or "
                                                           "--address's cluster (the same output and ledger)")
    script.add_argument("--address", help="with --ray: an existing Ray cluster (default: a local Ray on this machine)")
    script.add_argument("--actors", type=int, help="with --ray: how many actors (default: as many as the CPUs allow)")
    script.add_argument("--threads_per_actor", "--threads-per-actor", type=int, default=1,
                        help="with --ray: ONNX Runtime threads of each actor (default 1)")
    book = p.add_argument_group("books (--script book.epub, .md, .html, or --script_format book; docs/books.md)")
    book.add_argument("--paragraph_gap", type=float, help="seconds of silence between paragraphs (default 0.6)")
    book.add_argument("--chapter_gap", type=float, help="seconds of silence between chapters (default 2)")
    book.add_argument("--no_titles", action="store_true", help="do not speak the chapters' titles")
    book.add_argument("--dialogue_voice", metavar="VOICE", help="a second voice (as --speaker takes one) for what is "
                                                                "in the language's quotation marks")
    book.add_argument("--skip", metavar="PARTS", help="the parts of the book left out, separated by commas, or none "
                                                      "(default: cover,titlepage,copyright,toc,index,colophon,"
                                                      "bibliography,notes)")
    book.add_argument("--read_toc", action="store_true", help="read tables of contents and navigation too")
    book.add_argument("--read_page_numbers", action="store_true", help="read printed page numbers too")
    book.add_argument("--read_footnotes", action="store_true", help="read footnote markers and notes too")
    book.add_argument("--chapters", type=Path, help="also write one file a chapter into this folder (made if missing), "
                                                    "named by number and title")
    book.add_argument("--chapter_format", choices=("mp3", "m4a", "wav", "flac", "ogg"),
                      help="the chapter files' format (default: the output's; m4a for .m4b; mp3 with --acx)")
    book.add_argument("--read_along", type=Path, help="also write an EPUB 3 whose media overlays time every sentence "
                                                      "(every word with --caption_words) to the audio")
    book.add_argument("--loudness", type=float, metavar="LUFS", help="level each chapter to this integrated "
                                                                     "loudness (ITU-R BS.1770), e.g. -19")
    book.add_argument("--true_peak", type=float, help="with --loudness: the true-peak ceiling in dBTP (default -1)")
    book.add_argument("--acx", action="store_true", help="chapters as ACX asks: RMS -20 dB under a -3.5 dB peak, "
                                                         "0.75 s head and 2 s tail, MP3 192 kbps at 44.1 kHz; prints "
                                                         "each chapter's pass or fail")
    captions = p.add_argument_group("captions (--script, or --text alone)")
    captions.add_argument("--captions", type=Path, help="also write captions (.srt or .vtt): each segment's speech at its "
                                                        "sample offsets in the output")
    captions.add_argument("--caption_words", action="store_true",
                          help="word-level --captions, each word timed by the build's recogniser (optimize.py "
                               "--include-asr): an SRT cue per word, a VTT cue per segment with a timestamp per word")
    p.add_argument("--output", type=Path, default=Path("output.wav"),
                   help="WAV file (or folder for batches); a book also .m4b/.m4a (AAC) or .mp3, with chapter marks")
    p.add_argument("--float_wav", action="store_true", help="write 32-bit float WAV instead of 16-bit PCM")
    p.add_argument("--codes_out", type=Path, help="also save the generated codes [8,T] int64 (.npy; batches: a folder)")
    p.add_argument("--language", help="language id or name (e.g. en, English); unknown ones fall back to none")
    p.add_argument("--instruct", help='voice design, e.g. "female, low pitch, british accent"')
    p.add_argument("--ref_audio", type=Path, help="reference clip to clone (any rate, mono or stereo)")
    p.add_argument("--ref_text", help="transcript of --ref_audio (without it, the build's recogniser transcribes the clip, "
                                      "as upstream's Whisper does; a build without one needs it)")
    p.add_argument("--voice", type=Path, help="a voice file (skips encoding the reference): ours (.npz, from "
                                             "--save_voice), upstream's VoiceClonePrompt.save (.pt) or wyoming-piper's "
                                             "ref.rvq, told apart by content")
    p.add_argument("--save_voice", type=Path, help="save the voice (of --ref_audio, or --voice) to this new file: "
                                                  "NAME.pt in upstream's format (VoiceClonePrompt.load reads it), "
                                                  "any other name our .npz; never over an existing file")
    p.add_argument("--duration", type=float, help="output length in seconds (overrides --speed)")
    p.add_argument("--num_audio_tokens", type=int, help="output length in codec frames (25 per second)")
    p.add_argument("--speed", type=float, help="speaking rate factor (> 1 faster)")
    p.add_argument("--normalize_text", action="store_true",
                   help="numbers, dates, currency, times and units into words first, as upstream's "
                        "normalize_text=True (tags such as [laughter] and pinyin are kept)")
    add_generation_flags(p)
    p.add_argument("--seed", type=int, help="seed for the sampling noise: same seed, same output (line i of a batch "
                                            "draws from seed + i, so its noise does not depend on --batch_size)")
    p.add_argument("--provider", choices=("cpu", "cuda"),
                   help="execution provider (default: the build's; a gpu build runs on CUDA where available)")
    p.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: all cores)")
    p.add_argument("--batch_size", type=int, default=4, help="utterances decoded together for --text_file/--jsonl")
    p.add_argument("--quiet", action="store_true", help="no progress bar (a script's last line, spoke N of M segments, "
                                                        "is printed still)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from codes.runtime import jobs as job_io
    from codes.runtime.audio.outputs import check_output_path, save_codes, write_audio
    from codes.runtime.contract.manifest import find_builds
    from codes.runtime.request import Voice, item_noises
    from codes.runtime.script import DEFAULT_SPEAKER, caption_words, check_outputs, utterance_caption, write_captions
    from codes.runtime.synthesis import OmniVoiceOnnx

    settings = settings_from_flags(args)
    if args.caption_words and args.captions is None and args.read_along is None:
        raise UserError("--caption_words makes --captions word level (and a book's --read_along); give --captions "
                        "FILE.srt or FILE.vtt")
    if args.script is not None:
        return _speak_script(args, settings)
    given = _given(args, ("script_format", "speaker", "gap", "overlap", "stems", "max_batch", "address", "actors",
                          *BOOK_FLAGS), ("no_ledger", "ray", *BOOK_SWITCHES))
    if given:
        raise UserError(f"--{given[0]} goes with --script")
    if args.captions is not None and args.text is None:
        raise UserError("--captions goes with --script or --text (one utterance, a one-segment track)")
    if args.ref_audio and args.voice:
        raise UserError("give either --ref_audio (with its --ref_text, if any) or --voice, not both")
    if args.ref_text and not args.ref_audio:
        raise UserError("--ref_text needs --ref_audio, the clip it transcribes")
    if args.batch_size < 1:
        raise UserError(f"--batch_size must be >= 1, got {args.batch_size}")
    if args.text is not None:
        jobs = [job_io.Utterance(args.text, args.output, args.language, args.instruct, args.duration, args.speed)]
        codes_paths = [args.codes_out]
    else:
        read_jobs = job_io.jobs_from_text_file if args.text_file else job_io.jobs_from_jsonl
        jobs = read_jobs(args.text_file or args.jsonl, args.output)
        codes_folder = job_io.output_folder(args.codes_out, "--codes_out") if args.codes_out else None
        codes_paths = [codes_folder / (job.output.stem + ".npy") if codes_folder else None for job in jobs]
    # Every bad output path fails before any compute.
    for path in [*(job.output for job in jobs), *codes_paths, args.save_voice]:
        if path:
            check_output_path(path)
    if args.save_voice and args.save_voice.exists():
        raise UserError(f"--save_voice {args.save_voice} exists; give a new file name (a voice is never saved over a file)")
    if args.save_voice and not (args.ref_audio or args.voice):
        raise UserError("--save_voice saves the voice of --ref_audio or of --voice; give one")
    if args.captions is not None:
        check_outputs(args.output, args.captions, labels=OUTPUT_FLAGS)

    voice = Voice.load(args.voice) if args.voice else None  # a bad voice file fails before the model loads

    model_dir, higgs_dir = find_builds(args.model_dir, args.higgs_dir)
    tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, provider=args.provider, threads=args.threads,
                        backbone=args.backbone, asr_dir=args.asr_dir)
    if args.caption_words:
        tts.check_word_timings()  # before any work
    if args.ref_audio:
        voice = tts.create_voice(args.ref_audio, args.ref_text, settings.preprocess_prompt)
    if args.save_voice:
        try:
            voice.save(args.save_voice, exclusive=True)
        except FileExistsError:
            raise UserError(f"--save_voice {args.save_voice} appeared while the voice was made; give a new file name") from None

    # Every bad text, language, instruct, duration or speed fails before any compute.
    batches = [range(first, min(first + args.batch_size, len(jobs))) for first in range(0, len(jobs), args.batch_size)]
    # A line's own clip (upstream's test lists) clones that line; the rest use --ref_audio/--voice, if any.
    own = tts.create_voices([job.ref_audio for job in jobs], [job.ref_text for job in jobs], settings.preprocess_prompt)
    voices = [line_voice or voice for line_voice in own]
    requests = [
        tts.settle([jobs[i].text for i in batch], [jobs[i].language for i in batch], [jobs[i].instruct for i in batch],
                   [voices[i] for i in batch], [jobs[i].duration for i in batch], [jobs[i].speed for i in batch],
                   args.num_audio_tokens, args.normalize_text)
        for batch in batches
    ]
    # Load the codec's decoder now: a missing codec fails before any compute, and its load stays out of the RTF.
    tts.codec.load_decoder()

    progress = None if args.quiet else _progress_bar(settings.num_steps)
    start, audio_seconds = time.perf_counter(), 0.0
    for batch, batch_requests in zip(batches, requests):
        noises = item_noises(args.seed, len(batch), first=batch.start)  # a line sounds the same in any batch
        audios, codes = tts.synthesize(batch_requests, settings, noises, progress)
        for i, wav, item_codes, request in zip(batch, audios, codes, batch_requests):
            job, codes_path = jobs[i], codes_paths[i]
            # --text's captions, made before anything is written: the utterance is a one-segment track.
            caption = None if args.captions is None else utterance_caption(
                job.text, len(wav), int(settings.pad_duration * tts.sample_rate), DEFAULT_SPEAKER)
            if args.caption_words:
                caption = caption_words(tts, caption, wav, 0, request.text, request.lang, tts.sample_rate)
            write_audio(job.output, wav, tts.sample_rate, args.float_wav)
            if caption is not None:
                write_captions(args.captions, [caption], tts.sample_rate)
                if not args.quiet:
                    print(f"wrote {args.captions}", file=sys.stderr)
            audio_seconds += len(wav) / tts.sample_rate
            if codes_path:
                save_codes(codes_path, item_codes)
            if not args.quiet:
                print(f"wrote {job.output} ({len(wav) / tts.sample_rate:.2f} s)", file=sys.stderr)
    elapsed = time.perf_counter() - start
    print(f"RTF {elapsed / max(audio_seconds, 1e-9):.3f} ({elapsed:.2f} s for {audio_seconds:.2f} s of audio)")
    return 0


def _speak_script(args, settings) -> int:
    """A script, or a book (docs/books.md): read, checked and every output checked before the model loads;
    spoken with a ledger beside the output; written whole."""
    from codes.runtime.book import book_format
    from codes.runtime.contract.manifest import find_builds
    from codes.runtime.script import ScriptLedger
    from codes.runtime.synthesis import OmniVoiceOnnx

    for flag in ("instruct", "ref_audio", "ref_text", "voice", "save_voice", "duration", "num_audio_tokens", "codes_out"):
        if getattr(args, flag) is not None:
            raise UserError(f"--{flag} does not go with --script: voices are --speaker NAME=VOICE, and lengths are "
                            "the script's (a segment's duration, a cue's times)")
    if args.max_batch is not None and args.max_batch < 1:
        raise UserError(f"--max_batch must be >= 1, got {args.max_batch}")
    placement = _ray_placement(args)
    kind = book_format(args.script, args.script_format)
    work = _BookWork(args, kind) if kind is not None else _ScriptWork(args)
    model_dir, higgs_dir = find_builds(args.model_dir, args.higgs_dir)
    ledger = None if args.no_ledger else ScriptLedger(args.output, say=lambda line: print(line, file=sys.stderr))
    try:
        with _sigterm_interrupts():
            tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, provider=args.provider, threads=args.threads,
                                backbone=args.backbone, asr_dir=args.asr_dir)
            tts.codec.load_decoder()  # a missing codec fails before any compute
            if ledger is not None:
                ledger.remove_temporaries()  # what a killed run was writing
            # None: the format's own (on for text pieces, off for cues); given: for every piece.
            postprocess = None if args.postprocess_output is None and not args.no_postprocess \
                else settings.postprocess_output
            start = time.perf_counter()
            rendered = work.speak(tts, dict(seed=args.seed, language=args.language,
                                            speed=args.speed, normalize_text=args.normalize_text,
                                            postprocess=postprocess, max_batch=args.max_batch, settings=settings,
                                            caption_words=args.caption_words, ledger=ledger, ray=placement))
            elapsed, seconds = time.perf_counter() - start, len(rendered.audio) / rendered.sample_rate
            written = work.write(rendered, ledger.folder if ledger is not None else None)
            if ledger is not None:
                ledger.finish()
    except KeyboardInterrupt:
        kept = f"; the segments finished are kept in {ledger.folder}, run the same command again to resume" \
            if ledger is not None and ledger.pieces else ""
        print(f"error: interrupted; {args.output} was not written{kept}", file=sys.stderr)
        return 130
    finally:
        if ledger is not None:
            ledger.close()
    for path in written:
        if not args.quiet:
            print(f"wrote {path}", file=sys.stderr)
    work.report()
    print(f"RTF {elapsed / max(seconds, 1e-9):.3f} ({elapsed:.2f} s for {seconds:.2f} s of audio, "
          f"{len(rendered.captions)} segments)")
    print(f"spoke {rendered.spoken} of {len(rendered.captions)} segments, reused {rendered.reused}")
    return 0


class _ScriptWork:
    """A script: its speakers, its outputs (the mix, captions, stems)."""

    def __init__(self, args):
        from codes.runtime.script import DEFAULT_SPEAKER, check_outputs, parse_speakers, read_script

        given = _given(args, BOOK_FLAGS, BOOK_SWITCHES)
        if given:
            raise UserError(f"--{given[0]} is for books (.epub, .md, .html, or --script_format book), and "
                            f"{args.script} is a script")
        self.args = args
        self.speakers = parse_speakers(args.speaker or ())
        self.script = read_script(args.script, args.script_format, self.speakers, args.overlap or "error")
        check_outputs(args.output, args.captions, args.stems, self.speakers or [DEFAULT_SPEAKER], args.script,
                      labels=OUTPUT_FLAGS)

    def speak(self, tts, options):
        from codes.runtime.script import speak_script

        bar = None if self.args.quiet else _segment_bar(len(self.script.segments))
        return speak_script(tts, self.script, self.speakers, gap=self.args.gap or 0.0, on_progress=bar, **options)

    def write(self, rendered, part_folder):
        from codes.runtime.script import write_outputs

        return write_outputs(rendered, self.args.output, self.args.captions, self.args.stems, self.args.float_wav,
                             part_folder)

    def report(self):
        pass


class _BookWork:
    """A book: read (and refused if damaged, locked or empty) and checked before the model loads; its files
    are the audiobook's (docs/books.md); the loudness report is printed after them."""

    def __init__(self, args, kind: str):
        from codes.runtime.book import (DIALOGUE_SPEAKER, BookFiles, Reading, ReadingChoices, book_script,
                                        book_speakers, check_book_files, parse_skip, read_book)
        from codes.runtime.script import check_break, parse_speakers, parse_voice

        misplaced = next((flag for flag in ("stems", "gap", "overlap") if getattr(args, flag) is not None), None)
        if misplaced:
            raise UserError(f"--{misplaced} is for scripts; a book's pauses are --paragraph_gap and --chapter_gap")
        self.args = args
        self.speakers = parse_speakers(args.speaker or ())
        self.dialogue = parse_voice(args.dialogue_voice) if args.dialogue_voice is not None else None
        book_speakers(self.speakers, self.dialogue)  # a clash with --speaker fails here, before any work
        choices = ReadingChoices(parse_skip(args.skip), args.read_toc, args.read_page_numbers, args.read_footnotes)
        book = read_book(args.script, kind, choices)
        gaps = {name: check_break(value, f"--{name}") for name in ("paragraph_gap", "chapter_gap")
                if (value := getattr(args, name)) is not None}
        self.book = book_script(book, Reading(**gaps, titles=not args.no_titles, language=args.language,
                                              dialogue_speaker=DIALOGUE_SPEAKER if self.dialogue else None))
        self.files = BookFiles(args.output, args.chapters, args.chapter_format, args.captions, args.read_along,
                               args.loudness, -1.0 if args.true_peak is None else args.true_peak, args.acx,
                               args.float_wav)
        check_book_files(self.files, args.script)
        self.table = ""
        if book.left_out:
            print(f"left out of {args.script}: {', '.join(book.left_out)} (see --skip)", file=sys.stderr)

    def speak(self, tts, options):
        from codes.runtime.book import speak_book

        bar = None if self.args.quiet else _segment_bar(len(self.book.script.segments), self._chapter)
        return speak_book(tts, self.book, self.speakers, dialogue_voice=self.dialogue, on_progress=bar, **options)[1]

    def _chapter(self, done: int) -> str:
        chapters = self.book.book.chapters
        number = self.book.chapter_of(min(done, len(self.book.spots) - 1))
        return f"chapter {number + 1}/{len(chapters)} {chapters[number].title[:30]}"

    def write(self, rendered, part_folder):
        from codes.runtime.book import write_book

        written, self.table = write_book(self.book, rendered, self.files, part_folder)
        return written

    def report(self):
        """The loudness table: a result with --loudness or --acx (standard output), else a note (standard error)."""
        if self.args.loudness is not None or self.args.acx:
            print(self.table)
        elif not self.args.quiet:
            print(self.table, file=sys.stderr)


def _given(args, valued, switches) -> list[str]:
    """Which of these flags the command line gave (a valued flag not None, a switch set), in order."""
    return [flag for flag in valued if getattr(args, flag) is not None] + [flag for flag in switches if getattr(args, flag)]


def _ray_placement(args):
    from codes.runtime.script import RayPlacement

    if not args.ray:
        for flag in ("address", "actors"):
            if getattr(args, flag) is not None:
                raise UserError(f"--{flag} goes with --ray")
        return None
    if args.actors is not None and args.actors < 1:
        raise UserError(f"--actors must be >= 1, got {args.actors}")
    if args.threads_per_actor < 1:
        raise UserError(f"--threads_per_actor must be >= 1, got {args.threads_per_actor}")
    return RayPlacement(args.address, args.actors, args.threads_per_actor)


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM as Ctrl-C: what is being written is removed whole, and the ledger keeps what was finished."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _segment_bar(total: int, describe=None):
    """Segments done of total, the audio seconds spoken and an ETA; segments kept from an earlier run count as
    done from the start, not in the rate. describe(done): what is being spoken (a book: its chapter)."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc="segments", unit="segment", leave=False)

    def on_progress(done: int, total: int, seconds: float):
        if describe is not None:
            bar.set_description(describe(done), refresh=False)
        if seconds == 0:  # a kept segment, before anything is spoken
            bar.n = bar.initial = done
            bar.refresh()
        else:
            bar.update(done - bar.n)
            bar.set_postfix_str(f"{seconds:.1f} s of audio spoken")
        if done == total:
            bar.close()

    return on_progress


def _progress_bar(num_steps: int):
    """A tqdm bar over decoding steps; it restarts for each chunk or batch."""
    from tqdm import tqdm

    bar = None

    def on_step(step: int, total: int):
        nonlocal bar
        if bar is None or step == 1:
            if bar is not None:
                bar.close()
            bar = tqdm(total=total, desc="decoding", unit="step", leave=False)
        bar.update(1)
        if step == total:
            bar.close()
            bar = None

    return on_step


if __name__ == "__main__":
    sys.exit(run_cli(main))
