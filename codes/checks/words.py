"""What word timings cost: each aligner's time per window and per second of audio (encoder, decoder, the
alignment maths), its share of an utterance's synthesis, and its agreement with openai-whisper's find_alignment
on the same weights, for each Whisper size and precision (bench/words_bench.py).

Random weights decide where DTW puts each word, not how long it takes: the encoder reads one 30 s window
per window whatever the clip holds, and the decoder reads the text once per window (twice where a first
pass finds where a window ends), so the times carry over to a trained checkpoint of the same shapes.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from codes.checks.results_page import machine, machine_line
from codes.checks.workloads import TEXT_10S
from codes.export.generated_higgs import speech_like_signal

# Speech runs at about 2.5 words a second: each clip gets as many words of this text as it could hold.
WORDS = (TEXT_10S + " " + "Far below, the harbour woke slowly, gulls circling the masts while the first ferry "
         "sounded its horn and the market stalls along the quay opened one by one in the grey morning light.").split()
WORDS_PER_SECOND = 2.5
CLIP_SECONDS = (2.0, 5.0, 10.0, 30.0, 60.0)


def text_for(seconds: float) -> str:
    count = max(1, round(seconds * WORDS_PER_SECOND))
    return " ".join(WORDS[i % len(WORDS)] for i in range(count))


class TimedAligner:
    """An Aligner whose encoder, alignment decoder and alignment maths (find_alignment: softmax, filter, DTW,
    words) are timed (seconds, summed per stage)."""

    def __init__(self, aligner):
        self.aligner, self.seconds = aligner, {"encoder": 0.0, "decoder": 0.0, "dtw": 0.0}
        for stage, name in (("encoder", "_encode"), ("decoder", "alignment_logits")):
            setattr(aligner, name, self._timed(stage, getattr(aligner, name)))

    def _timed(self, stage, method):
        def timed(*args):
            start = time.perf_counter()
            try:
                return method(*args)
            finally:
                self.seconds[stage] += time.perf_counter() - start
        return timed

    def align(self, wav, rate: int, text: str, language: str) -> dict:
        from codes.runtime.recognition import alignment

        self.seconds = dict.fromkeys(self.seconds, 0.0)
        maths = alignment.find_alignment
        alignment.find_alignment = self._timed("dtw", maths)
        start = time.perf_counter()
        try:
            windows = self.aligner.aligned_windows(wav, rate, text, language)
        finally:
            alignment.find_alignment = maths
        total = time.perf_counter() - start
        return {"total_s": total, **{f"{k}_s": v for k, v in self.seconds.items()},
                "rest_s": total - sum(self.seconds.values()), "windows": len(windows),
                "words": sum(len(w.words) for w in windows)}


def whisper_name(aligner) -> str:
    """The Whisper an aligner folder was built from, as its manifest names it."""
    return str(aligner.manifest["source"].get("asr_model") or aligner.folder.name)


def alignment_costs(folders: list[Path], threads: int, seconds: tuple[float, ...] = CLIP_SECONDS, repeats: int = 3,
                    log=print) -> list[dict]:
    """Median timings of aligning each clip length with each aligner (after a warm-up), with the encoder's,
    the decoder's and the maths' parts. The aligners and clips take turns in every round, so a busy spell of
    the machine falls on all of them alike."""
    from codes.runtime.recognition.aligner import Aligner

    timed, load_s = [], []
    for folder in folders:
        start = time.perf_counter()
        timed.append(TimedAligner(Aligner(folder, threads=threads)))
        load_s.append(time.perf_counter() - start)
        timed[-1].align(speech_like_signal(1.0, 24000, 99), 24000, "Warm up.", "en")
    clips = [(speech_like_signal(length, 24000, seed=i + 1), text_for(length)) for i, length in enumerate(seconds)]
    runs: dict[tuple[int, int], list[dict]] = {}
    for round_ in range(repeats):
        for r, aligner in enumerate(timed):
            for c, (wav, text) in enumerate(clips):
                run = aligner.align(wav, 24000, text, "en")
                runs.setdefault((r, c), []).append({**run, "load_1min": os.getloadavg()[0]})
                log(f"  round {round_ + 1}, {whisper_name(aligner.aligner)} {seconds[c]:g} s: {run['total_s']:.2f} s")
    results = []
    for r, aligner in enumerate(timed):
        rows = []
        for c, length in enumerate(seconds):
            row = {key: statistics.median(x[key] for x in runs[(r, c)]) for key in runs[(r, c)][0]}
            rows.append({**row, "seconds": length, "per_audio_second_s": row["total_s"] / length})
        results.append({"precision": aligner.aligner.manifest["precision"], "source": whisper_name(aligner.aligner),
                        "load_s": load_s[r], "clips": rows})
    return results


EXACTNESS_CLIPS = (("en", 10.0, 1), ("zh", 8.0, 2), ("en", 40.0, 3))
ZH_TEXT = "老灯塔看守人每天傍晚爬上螺旋楼梯，数着一百一十二级台阶，点亮那盏在雾中引导渔船平安回家的灯。"


def exactness(folder: Path, threads: int, log=print) -> list[dict]:
    """Each clip's words and times from the aligner in `folder` against openai-whisper's find_alignment on
    the checkpoint it was built from (its manifest's source; torch fp32), over the aligner's windows."""
    import torch

    from codes.checks.equiv_words import largest_time_difference, openai_whisper_model, reference_words
    from codes.export.asr_build import resolve_whisper
    from codes.runtime.recognition.aligner import Aligner

    torch.set_num_threads(threads)
    recogniser = Aligner(folder, threads=threads)
    model = openai_whisper_model(resolve_whisper(whisper_name(recogniser)))
    rows = []
    for language, seconds, seed in EXACTNESS_CLIPS:
        wav = speech_like_signal(seconds, 16000, seed)
        text = ZH_TEXT if language == "zh" else text_for(seconds)
        windows = recogniser.aligned_windows(wav, 16000, text, language)
        ours = [word for window in windows for word in window.words]
        theirs = reference_words(model, wav, windows, language)
        same = [w["word"] for w in ours] == [w["word"] for w in theirs]
        rows.append({"language": language, "seconds": seconds, "words": len(ours), "windows": len(windows),
                     "same_words": same, "largest_difference_s": largest_time_difference(ours, theirs),
                     "precision": recogniser.manifest["precision"], "source": whisper_name(recogniser)})
        log(f"  exactness {language} {seconds:g} s: {rows[-1]}")
    return rows


def synthesis_share(model_dir: Path, threads: int, log=print) -> dict:
    """The 10 s utterance of the rtf benchmark made and then aligned on one build: each one's time."""
    from codes.checks.workloads import DETERMINISTIC
    from codes.runtime.synthesis import OmniVoiceOnnx

    tts = OmniVoiceOnnx(model_dir, threads=threads)
    tts.generate("Warm up.", duration=1.0, num_steps=2, seed=0, **DETERMINISTIC)
    tts.align_words(speech_like_signal(1.0, 24000, 99), "Warm up.", "en")
    start = time.perf_counter()
    audio = tts.generate(TEXT_10S, language="en", duration=10.0, num_steps=32, seed=0, **DETERMINISTIC)
    synthesis_s = time.perf_counter() - start
    start = time.perf_counter()
    words = tts.align_words(audio, TEXT_10S, "en")
    align_s = time.perf_counter() - start
    row = {"model_dir": str(model_dir), "audio_s": len(audio) / tts.sample_rate, "synthesis_s": synthesis_s,
           "align_s": align_s, "share_of_synthesis": align_s / synthesis_s, "words": len(words),
           "recogniser_precision": tts.load_aligner().manifest["precision"]}
    row["load_1min"] = os.getloadavg()[0]
    log(f"  synthesis {synthesis_s:.1f} s, alignment {align_s:.2f} s")
    return row


def page(report: dict) -> list[str]:
    """bench/words_results.md."""
    lines = ["# Word timings: what aligning costs", "",
             f"`{report['command']}` on {machine_line(report['machine'])}, {report['threads']} threads, "
             f"{report['date']}. Raw figures: `words_results.json`.", "",
             f"The aligners are built from `{'`, `'.join(sorted({c['source'] for c in report['costs']}))}` "
             "(`base-whisper`, `small-whisper`: whisper-base's and whisper-small's shapes and alignment heads; "
             "`full-whisper`: whisper-large-v3-turbo's; random weights, large-v3's vocabulary). Each clip "
             "is speech-like "
             f"noise with {WORDS_PER_SECOND:g} words of text a second, aligned by `Aligner.aligned_windows` "
             "(median of the runs after a warm-up); encoder and decoder are the graphs' time, DTW is find_alignment's "
             "maths (softmax, filter, DTW, words), the rest is numpy (resampling, features); load is the median "
             "1-minute load average after the clip (2 is the benchmark's own 2 threads, more means other work shared "
             "the CPU). The aligners and clips take turns in every round.", "",
             "| Whisper | precision | clip | windows | time | per audio second | encoder | decoder | DTW | rest | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for costs in report["costs"]:
        for row in costs["clips"]:
            lines.append(f"| {costs['source']} | {costs['precision']} | {row['seconds']:g} s | {row['windows']:g} | "
                         f"{row['total_s']:.2f} s | {row['per_audio_second_s']:.3f} s | {row['encoder_s']:.2f} s | "
                         f"{row['decoder_s']:.2f} s | {row['dtw_s']:.3f} s | {row['rest_s']:.2f} s | "
                         f"{row.get('load_1min', 0):.1f} |")
    lines.append("")
    if report.get("share"):
        share = report["share"]
        lines += ["## Its share of an utterance", "",
                  f"The rtf benchmark's 10 s utterance (32 steps, deterministic) on `{share['model_dir']}` "
                  f"(its aligner {share['recogniser_precision']}): synthesis {share['synthesis_s']:.1f} s, then "
                  f"aligning its {share['words']} words {share['align_s']:.2f} s, "
                  f"**{100 * share['share_of_synthesis']:.1f}%** of the synthesis time (1-minute load average "
                  f"{share.get('load_1min', 0):.1f} after it).", ""]
    if report.get("exactness"):
        lines += ["## Against openai-whisper on the same weights", "",
                  "`whisper.timing.find_alignment` (then `merge_punctuations`) on openai-whisper's `Whisper` "
                  "module loaded with the same checkpoint (torch fp32), over the aligner's windows.", "",
                  "| Whisper | precision | clip | words | windows | same words | largest time difference |",
                  "|---|---|---|---|---|---|---|"]
        for row in report["exactness"]:
            lines.append(f"| {row['source']} | {row['precision']} | {row['language']} {row['seconds']:g} s | {row['words']} | "
                         f"{row['windows']} | {'yes' if row['same_words'] else 'no'} | "
                         f"{row['largest_difference_s'] * 1000:.0f} ms |")
        lines.append("")
    lines += report.get("notes", [])
    return lines


def run(aligners: dict[str, Path], compare: bool, model_dir: Path | None, threads: int,
        seconds: tuple[float, ...], repeats: int, command: str, log=print) -> dict:
    report = {"command": command, "machine": machine(), "threads": threads,
              "date": time.strftime("%Y-%m-%d"), "costs": [], "exactness": [], "share": None}
    report["costs"] = alignment_costs(list(aligners.values()), threads, seconds, repeats, log)
    if compare:
        for folder in aligners.values():
            report["exactness"] += exactness(folder, threads, log)
    if model_dir is not None:
        report["share"] = synthesis_share(model_dir, threads, log)
    return report
