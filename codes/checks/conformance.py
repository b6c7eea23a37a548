"""The conformance vectors: what the Python runtime computes at each host stage from text to samples, written as
JSON files a second host (docs/runtime.md) runs too, and read back by tests/conformance/test_conformance.py.

Each stage is a list of cases (inputs, made here from fixed numbers, no clock and no entropy) and one function
that runs the runtime on a case's inputs and returns its outputs in the vectors' JSON form:
- integers exact, and integers a JavaScript number cannot hold (past 2**53) as decimal strings;
- floats as the shortest text that reads back to the same value (float32 values as float32's), with the
  stage's stated tolerance, absolute;
- special values as strings: "inf", "-inf", "nan"; booleans in arrays as 0 and 1.

`write_vectors(folder)` writes every stage's file (tools/conformance.py writes tests/conformance/);
`check_vector(vector)` runs one file's cases again and lists the differences. Only the torch-free runtime runs
here, and the tokenizer file the generated checkpoints ship (codes/export/tokenizer_build.py, no torch either).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.errors import UserError

SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
RATE = 24_000


# --- the JSON form -----------------------------------------------------------------------------------------------


def float_value(value: float, single: bool = False):
    """A float in the vectors' form: special values as strings; `single`: written as float32's shortest text."""
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(str(np.float32(value))) if single else value


def floats(array, single: bool = True):
    """A float array as nested lists in the vectors' form."""
    array = np.asarray(array)
    if array.ndim == 0:
        return float_value(array, single)
    return [floats(part, single) for part in array]


def ints(array) -> list:
    """An integer or boolean array as nested lists of ints."""
    return np.asarray(array).astype(np.int64).tolist()


def big(value: int):
    """An integer as JSON holds it for every host: a number up to 2**53, a decimal string past it."""
    return int(value) if abs(int(value)) < 2**53 else str(int(value))


def read_floats(values, dtype=np.float32) -> np.ndarray:
    """The inverse of floats(): nested lists (special values as strings) as an array."""
    def number(value):
        return [number(v) for v in value] if isinstance(value, list) else SPECIAL.get(value, value)
    return np.asarray(number(values), dtype=dtype)


# --- the stages --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    name: str  # the file is tests/conformance/<name>.json
    about: str
    runtime: tuple[str, ...]  # the runtime's functions each case runs
    upstream: tuple[str, ...]  # omnivoice 0.2.1's functions they reproduce
    tolerance: float  # absolute, on every float of the expected outputs
    cases: Callable[[], list[dict]]  # each {"name", "inputs"}
    run: Callable[[dict], dict]  # a case's inputs -> its outputs, in the JSON form


MULTILINGUAL = [
    "Hello there. Mr. Smith arrived at 5.30 p.m., didn't he? Yes!",
    "  Line one\r\nline two\twith  tabs （and full-width parentheses）  ",
    "你好，世界。今天 天气 很好！我们去 公园 吧？",
    "こんにちは。今日はいい天気ですね！散歩に行きましょう。",
    "Привет, как дела? Всё хорошо. Спасибо!",
    "مرحبا بكم. كيف حالك؟ أنا بخير!",
    "नमस्ते, आप कैसे हैं? मैं ठीक हूँ।",
    "Guten Tag [laughter] wie geht es Ihnen? Sehr gut [sigh] danke.",
    "He said \"Stop!\" and left... Then (quietly) she laughed.",
    "The price rose 3.5% — a record; analysts, e.g. Dr. Lee, were surprised.",
    "Mixed 中文 and English text, with 한국어 too.",
    "",
]


def _text_cases() -> list[dict]:
    cases = []
    for index, text in enumerate(MULTILINGUAL):
        ref_text = "Reference words here" if index % 3 == 0 else ("参考文本" if index % 3 == 1 else None)
        cases.append({"name": f"text_{index}", "inputs": {
            "text": text, "ref_text": ref_text, "chunk_len": 12 + 5 * (index % 4), "min_chunk_len": 3,
            "target_len": 40 + 13 * index, "audio_chunk_duration": 1.0, "frame_rate": 25}})
    return cases


def _text_run(inputs: dict) -> dict:
    from codes.runtime.text.cleanup import (add_punctuation, chunk_long_text, chunk_text_punctuation, combine_text,
                                    contains_chinese, split_nonverbal)

    text = inputs["text"]
    out = {"combine_text": combine_text(text, inputs["ref_text"]), "add_punctuation": add_punctuation(text),
           "split_nonverbal": split_nonverbal(text), "contains_chinese": contains_chinese(text),
           "chunk_text_punctuation": chunk_text_punctuation(text, inputs["chunk_len"], inputs["min_chunk_len"])}
    if text:
        out["chunk_long_text"] = chunk_long_text(text, inputs["target_len"], inputs["audio_chunk_duration"],
                                                 inputs["frame_rate"])
    return out


def _stream_cases() -> list[dict]:
    return [{"name": f"stream_{i}", "inputs": {"text": text, "push_size": 3 + i % 4}}
            for i, text in enumerate(MULTILINGUAL)]


def _stream_run(inputs: dict) -> dict:
    from codes.runtime.text.chunks import TextStream, stream_chunks

    text, size = inputs["text"], inputs["push_size"]
    stream = TextStream()
    pushed = [stream.push(text[start:start + size]) for start in range(0, len(text), size)]
    return {"stream_chunks": stream_chunks(text), "pushes": pushed, "flush": stream.flush()}


def _settle_cases() -> list[dict]:
    requests = [
        {"text": "Hello there.", "language": "English"},
        {"text": "Hello there.", "language": "en", "speed": 1.5},
        {"text": "Hello there, general.", "language": "klingon", "duration": 2.5},
        {"text": "你好，世界。", "language": "Chinese", "instruct": "female, low pitch"},
        {"text": "Hello, world.", "instruct": "Female,  British Accent"},
        {"text": "今天天气很好。", "instruct": "male，河南话"},
        {"text": "Good morning.", "instruct": "elderly, whisper"},
        {"text": "Good morning.", "instruct": "male, female"},
        {"text": "Good morning.", "instruct": "sichuan accent"},
        {"text": "Good morning.", "instruct": "british accent, 四川话"},
        {"text": "A clone speaks this text.", "language": "none", "voice": {"text": "The words of the clip.", "frames": 60}},
        {"text": "A clone speaks this text.", "voice": {"text": "The words of the clip.", "frames": 60}, "speed": 0.8},
        {"text": "A forced length.", "num_frames": 17},
        {"text": "A forced length.", "voice": {"text": "Clip words.", "frames": 30}, "num_frames": 40},
        {"text": "Empty speed.", "speed": 0},
    ]
    return [{"name": f"settle_{i}", "inputs": request} for i, request in enumerate(requests)]


def _settle_run(inputs: dict) -> dict:
    from codes.runtime.request import Voice, settle

    voice = inputs.get("voice")
    voice = Voice(np.zeros((8, voice["frames"]), np.int64), voice["text"], None) if voice else None
    try:
        request, = settle([inputs["text"]], inputs.get("language"), inputs.get("instruct"), voice,
                          inputs.get("duration"), inputs.get("speed"), inputs.get("num_frames"))
    except UserError:
        return {"error": "UserError"}
    return {"text": request.text, "lang": request.lang, "instruct": request.instruct,
            "target_len": request.target_len, "speed": float_value(request.speed)}


_TOKENIZER = None


def tokenizer():
    """The runtime's tokenizer over the tokenizer.json every generated checkpoint (and so every tiny build) ships."""
    global _TOKENIZER
    if _TOKENIZER is None:
        from codes.export.tokenizer_build import cached_tokenizer_json
        from codes.runtime.text.tokenizer import TextTokenizer

        path = cached_tokenizer_json()
        _TOKENIZER = (TextTokenizer.from_file(path), hashlib.sha256(path.read_bytes()).hexdigest())
    return _TOKENIZER


def tokenizer_sha256() -> str:
    return tokenizer()[1]


def _tokens_cases() -> list[dict]:
    pieces = [*[t for t in MULTILINGUAL if t],
              "<|denoise|><|lang_start|>en<|lang_end|><|instruct_start|>None<|instruct_end|>",
              "<|text_start|>Hello [laughter] world<|text_end|>", "[laughter]", " leading and trailing  ",
              "emoji 🙂 and café, naïve", "12345 67.89", "tab\tand\nnewline"]
    cases = [{"name": f"encode_{i}", "inputs": {"encode": piece}} for i, piece in enumerate(pieces)]
    cases += [{"name": f"text_token_ids_{i}", "inputs": {"text": text, "ref_text": ref}} for i, (text, ref) in enumerate([
        ("Hello [laughter] world.", None), ("你好 [sigh]。", "参考 文本"), ("Plain words.", "Reference words.")])]
    return cases


def _tokens_run(inputs: dict) -> dict:
    from codes.runtime.voices.prompt import text_token_ids

    tok = tokenizer()[0]
    if "encode" in inputs:
        return {"ids": tok.encode(inputs["encode"])}
    return {"ids": text_token_ids(tok, inputs["text"], inputs["ref_text"])}


def _duration_cases() -> list[dict]:
    chars = "aZ 5,.!—、éüßñαЖשاअกあアカ中한ㄅ\u0301\u0640\U00020001\u200b\t"
    cases = [{"name": "char_weights", "inputs": {"chars": list(chars)}}]
    texts = [(t, None, None) for t in MULTILINGUAL[:8]] + [
        ("Short.", "A much longer reference transcript than the text.", 120),
        ("A long target text that runs on for a good while, on and on, past the short boost.", "Short ref.", 20),
        ("中文的句子，很长很长。", "参考文本", 40), ("No reference weight.", "...", 30)]
    for i, (text, ref_text, ref_frames) in enumerate(texts):
        for speed, duration in ((None, None), (1.3, None), (0.7, None), (None, 3.2)):
            cases.append({"name": f"target_len_{i}_{speed}_{duration}", "inputs": {
                "text": text, "ref_text": ref_text, "ref_frames": ref_frames, "speed": speed, "duration": duration}})
    return cases


def _duration_run(inputs: dict) -> dict:
    from codes.runtime.text.duration import (FALLBACK_REF_FRAMES, FALLBACK_REF_TEXT, char_weight, estimate_frames,
                                        resolve_target_len)

    if "chars" in inputs:
        return {"weights": [char_weight(c) for c in inputs["chars"]]}
    text, ref_text, ref_frames = inputs["text"], inputs["ref_text"], inputs["ref_frames"]
    target_len, speed = resolve_target_len(text, ref_text, ref_frames, inputs["speed"], inputs["duration"])
    frames = estimate_frames(text, ref_text, ref_frames) if ref_text else estimate_frames(
        text, FALLBACK_REF_TEXT, FALLBACK_REF_FRAMES)
    return {"estimate_frames": float_value(frames), "target_len": target_len, "speed": float_value(speed)}


def _ref_codes(frames: int, seed: int) -> list:
    return np.random.default_rng(seed).integers(0, 1024, (8, frames)).tolist()


PROMPTS = [
    {"name": "plain", "text": "Hello there.", "target_len": 5, "lang": "en", "instruct": None},
    {"name": "no_language", "text": "Hi [laughter] you.", "target_len": 3, "lang": None, "instruct": None},
    {"name": "design", "text": "你好。", "target_len": 4, "lang": "zh", "instruct": "女，低音调"},
    {"name": "clone", "text": "Again.", "target_len": 6, "lang": "en", "instruct": None,
     "ref_text": "The clip's words.", "ref_codes": _ref_codes(4, 11), "denoise": True},
    {"name": "clone_no_denoise", "text": "Again.", "target_len": 2, "lang": None, "instruct": "male",
     "ref_text": "Clip.", "ref_codes": _ref_codes(3, 12), "denoise": False},
]


def _prompt_cases() -> list[dict]:
    cases = [{"name": p["name"], "inputs": {"item": {k: v for k, v in p.items() if k != "name"}}} for p in PROMPTS]
    cases.append({"name": "cfg_batch", "inputs": {"items": [
        {k: v for k, v in p.items() if k != "name"} for p in (PROMPTS[0], PROMPTS[2], PROMPTS[3])]}})
    return cases


def _prompt_item(item: dict):
    from codes.runtime.voices.prompt import build_prompt

    codes = np.asarray(item["ref_codes"], np.int64) if "ref_codes" in item else None
    return build_prompt(tokenizer()[0], item["text"], item["target_len"], ref_text=item.get("ref_text"),
                        ref_codes=codes, lang=item["lang"], instruct=item["instruct"], denoise=item.get("denoise", True))


def _prompt_run(inputs: dict) -> dict:
    from codes.runtime.voices.prompt import build_cfg_batch

    if "item" in inputs:
        prompt = _prompt_item(inputs["item"])
        return {"input_ids": ints(prompt.input_ids), "audio_mask": ints(prompt.audio_mask)}
    items = inputs["items"]
    batch = build_cfg_batch([_prompt_item(item) for item in items], [item["target_len"] for item in items])
    return {"input_ids": ints(batch.input_ids), "audio_mask": ints(batch.audio_mask),
            "attention_mask": ["".join(map(str, row)) for row in ints(batch.attention_mask[:, 0].reshape(-1, batch.attention_mask.shape[-1]))],
            "cond_lens": list(batch.cond_lens)}


def _schedule_cases() -> list[dict]:
    shapes = [(1, 1, 1.0), (7, 2, 0.1), (25, 32, 0.1), (50, 32, 0.1), (250, 32, 0.1), (3, 8, 1.0), (40, 16, 0.5),
              (13, 10, 2.0), (750, 32, 0.1), (9, 3, 0.1), (1, 32, 0.1)]
    return [{"name": f"schedule_{t}_{n}_{s}", "inputs": {"target_len": t, "num_steps": n, "t_shift": s}}
            for t, n, s in shapes]


def _schedule_run(inputs: dict) -> dict:
    from codes.runtime.model.decoding import reveal_schedule, time_steps

    return {"time_steps": floats(time_steps(inputs["num_steps"], inputs["t_shift"])),
            "reveal_counts": reveal_schedule(inputs["target_len"], inputs["num_steps"], inputs["t_shift"])}


def _reveal_cases() -> list[dict]:
    """Recorded cell scores (what the scoring graph, or the numpy scoring, gives at each step), rounded to one
    decimal so that equal scores meet and the tie rule decides; -inf scores too."""
    from codes.runtime.model.decoding import reveal_schedule

    cases = []
    for name, target_lens, num_steps, seed in (("two_items", [3, 5], 4, 21), ("one_item_many_ties", [4], 3, 22),
                                              ("uneven", [1, 6, 2], 5, 23)):
        rng = np.random.default_rng(seed)
        steps = []
        for _ in range(num_steps):
            cells = []
            for t in target_lens:
                scores = np.round(rng.standard_normal((8, t)) * 2, 1).astype(np.float32)
                scores[rng.random((8, t)) < 0.1] = -np.inf
                cells.append({"predicted": rng.integers(0, 1024, (8, t)).tolist(), "scores": floats(scores)})
            steps.append(cells)
        schedules = [reveal_schedule(t, num_steps, 0.1) for t in target_lens]
        cases.append({"name": name, "inputs": {"target_lens": target_lens, "num_steps": num_steps, "t_shift": 0.1,
                                               "reveal_counts": schedules, "steps": steps}})
    return cases


def _reveal_run(inputs: dict) -> dict:
    from codes.runtime.contract.specs import AUDIO_MASK_ID
    from codes.runtime.model.decoding import reveal_top_k

    tokens = [np.full((8, t), AUDIO_MASK_ID, np.int64) for t in inputs["target_lens"]]
    after = []
    for step, cells in enumerate(inputs["steps"]):
        for item, cell in enumerate(cells):
            count = inputs["reveal_counts"][item][step]
            if count > 0:
                tokens[item] = reveal_top_k(tokens[item], np.asarray(cell["predicted"], np.int64),
                                            read_floats(cell["scores"]), count, AUDIO_MASK_ID)
        after.append([ints(t) for t in tokens])
    return {"tokens_after_step": after}


def _cell_cases() -> list[dict]:
    """The numpy reference of the cell-scoring graphs (what a host without them runs), on a vocabulary of 17
    (the last id is MASK) so that a vector stays small: the maths does not depend on the vocabulary's size."""
    cases = []
    for name, settings, seed in (
            ("greedy_positions", {"guidance_scale": 2.0, "layer_penalty_factor": 5.0, "position_temperature": 5.0, "class_temperature": 0.0}, 31),
            ("no_noise", {"guidance_scale": 0.0, "layer_penalty_factor": 5.0, "position_temperature": 0.0, "class_temperature": 0.0}, 32),
            ("sampled", {"guidance_scale": 3.0, "layer_penalty_factor": 1.0, "position_temperature": 2.0, "class_temperature": 0.8}, 33)):
        rng = np.random.default_rng(seed)
        cases.append({"name": name, "inputs": {
            "settings": settings, "mask_id": 16, "noise_seed": 100 + seed,
            "cond_logits": floats(rng.standard_normal((8, 2, 17)).astype(np.float32) * 3),
            "uncond_logits": floats(rng.standard_normal((8, 2, 17)).astype(np.float32) * 3)}})
    cases.append({"name": "gumbel", "inputs": {"uniform": [0.0, 1e-10, 0.25, 0.5, 0.9999999]}})
    return cases


def _cell_run(inputs: dict) -> dict:
    from codes.runtime.contract.settings import GenerationSettings
    from codes.runtime.model.decoding import RandomNoise, cell_scores, gumbel_noise

    if "uniform" in inputs:
        return {"gumbel": floats(gumbel_noise(np.asarray(inputs["uniform"], np.float32)))}
    settings = GenerationSettings(**inputs["settings"])
    predicted, scores = cell_scores(read_floats(inputs["cond_logits"]), read_floats(inputs["uncond_logits"]),
                                    settings, RandomNoise(inputs["noise_seed"]), inputs["mask_id"])
    return {"predicted": ints(predicted), "scores": floats(scores)}


SEEDS = [0, 1, 1234, 2**32 + 7, 2**53 + 1, 2**63 - 1]


class Recording:
    """A NoiseSource that notes each draw: its shape, its first values and its last."""

    def __init__(self, source, item: int, log: list):
        self.source, self.item, self.log = source, item, log

    def uniform(self, shape):
        values = self.source.uniform(shape)
        flat = values.ravel()
        self.log.append({"item": self.item, "shape": list(shape), "first": floats(flat[:3]), "last": floats(flat[-1])})
        return values


def _noise_cases() -> list[dict]:
    cases = [{"name": f"stream_{seed}", "inputs": {"seed": big(seed), "count": 8}} for seed in SEEDS]
    cases.append({"name": "items_seed_plus_i", "inputs": {"seed": big(2**63 - 2), "items": 3, "first": 0, "count": 4}})
    cases.append({"name": "items_from_line_5", "inputs": {"seed": 42, "items": 2, "first": 5, "count": 4}})
    for name, settings in (("draws_greedy_tokens", {"position_temperature": 5.0, "class_temperature": 0.0}),
                           ("draws_sampled_tokens", {"position_temperature": 5.0, "class_temperature": 0.7}),
                           ("draws_none", {"position_temperature": 0.0, "class_temperature": 0.0})):
        cases.append({"name": name, "inputs": {"seed": 7, "target_lens": [2, 1], "num_steps": 3, "t_shift": 0.1,
                                               "settings": settings}})
    return cases


def _noise_run(inputs: dict) -> dict:
    from codes.runtime.contract.settings import GenerationSettings
    from codes.runtime.contract.specs import AUDIO_VOCAB_SIZE
    from codes.runtime.model.decoding import RandomNoise, iterative_decode
    from codes.runtime.request import item_noises
    from codes.runtime.voices.prompt import CfgBatch

    if "target_lens" in inputs:
        target_lens = inputs["target_lens"]
        settings = GenerationSettings(num_steps=inputs["num_steps"], t_shift=inputs["t_shift"], **inputs["settings"])
        log: list = []
        sources = [Recording(noise, i, log) for i, noise in enumerate(item_noises(inputs["seed"], len(target_lens)))]
        longest = max(target_lens)
        batch = CfgBatch(np.full((2 * len(target_lens), 8, longest), 1024, np.int64),
                         np.ones((2 * len(target_lens), longest), bool), None, list(target_lens))
        flat_logits = np.linspace(-1, 1, AUDIO_VOCAB_SIZE, dtype=np.float32)  # the draws depend on shapes only

        def logits(input_ids, batch, lens):
            return [(np.broadcast_to(flat_logits, (8, t, AUDIO_VOCAB_SIZE)).copy(),) * 2 for t in lens]

        steps = []

        def on_step(step, total):
            steps.append(len(log))

        iterative_decode(batch, target_lens, logits, settings, sources, on_step)
        for step, end in enumerate(steps):
            for draw in log[steps[step - 1] if step else 0:end]:
                draw["step"] = step
        return {"draws": [{"step": d["step"], **{k: v for k, v in d.items() if k != "step"}} for d in log]}
    seed = int(inputs["seed"])
    if "items" in inputs:
        noises = item_noises(seed, inputs["items"], inputs["first"])
        return {"item_seeds": [big(seed + inputs["first"] + i) for i in range(inputs["items"])],
                "first_values": [floats(n.uniform((inputs["count"],))) for n in noises]}
    noise = RandomNoise(seed)
    state = noise.rng.bit_generator.state["state"]
    raw = np.random.default_rng(seed).bit_generator.random_raw(4)
    return {"pcg64_state": f"{state['state']:032x}", "pcg64_inc": f"{state['inc']:032x}",
            "raw_uint64": [f"{int(v):016x}" for v in raw],
            "float32": floats(noise.uniform((inputs["count"],))),
            "then_shape_2x3": floats(noise.uniform((2, 3)))}


def _clip(count: int, rate: int, seed: int) -> np.ndarray:
    """A short clip: two tones and a little noise, float32."""
    time = np.arange(count) / rate
    tones = 0.4 * np.sin(2 * np.pi * 440 * time) + 0.2 * np.sin(2 * np.pi * 3000 * time)
    return (tones + 0.05 * np.random.default_rng(seed).standard_normal(count)).astype(np.float32)


def _resample_cases() -> list[dict]:
    cases = []
    for method, rates in (("sinc", [(16000, 24000), (44100, 24000), (48000, 24000), (22050, 24000), (24000, 16000)]),
                          ("soxr", [(16000, 24000), (44100, 24000), (48000, 24000)])):
        for orig, new in rates:
            count = orig // 100
            cases.append({"name": f"{method}_{orig}_{new}", "inputs": {
                "method": method, "orig_sr": orig, "new_sr": new, "wav": floats(_clip(count, orig, orig % 97))}})
    return cases


def _resample_run(inputs: dict) -> dict:
    from codes.runtime.audio.processing import resample

    wav = read_floats(inputs["wav"])
    if inputs["method"] == "sinc":
        return {"wav": floats(resample(wav, inputs["orig_sr"], inputs["new_sr"]))}
    import soxr

    return {"wav": floats(soxr.resample(wav, inputs["orig_sr"], inputs["new_sr"]).astype(np.float32))}


POST_RATE = 2_000  # the post-processing vectors' rate: every rule is in milliseconds, and a small rate keeps them small


def _speech_pcm(seed: int) -> list[int]:
    """16-bit samples at POST_RATE: silence, a sound, a long quiet gap, a sound, silence."""
    rng = np.random.default_rng(seed)
    parts = []
    for seconds, level in ((0.2, 20), (0.2, 9000), (1.1, 40), (0.15, 12000), (0.2, 10)):
        count = int(seconds * POST_RATE)
        parts.append(np.sin(np.arange(count) * 0.9) * level * (0.5 + rng.random(count)))
    return np.concatenate(parts).astype(np.int16).tolist()


def _post_cases() -> list[dict]:
    pcm = _speech_pcm(41)
    return [
        {"name": "post_process_no_reference", "inputs": {"function": "post_process", "pcm16": pcm, "ref_rms": None,
                                                         "settings": {}, "sample_rate": POST_RATE}},
        {"name": "post_process_quiet_reference_kept_silences", "inputs": {
            "function": "post_process", "pcm16": pcm[200:1000], "ref_rms": 0.05, "sample_rate": POST_RATE,
            "settings": {"postprocess_output": False, "pad_duration": 0.05, "fade_duration": 0.2}}},
        {"name": "remove_silence_reference_rules", "inputs": {"function": "remove_silence", "pcm16": pcm[300:1700],
                                                              "sample_rate": POST_RATE, "mid_sil_ms": 200,
                                                              "lead_sil_ms": 100, "trail_sil_ms": 200}},
        {"name": "cross_fade_chunks", "inputs": {"function": "cross_fade_chunks", "sample_rate": POST_RATE,
                                                 "silence_duration": 0.03, "chunks_pcm16": [pcm[400:460], pcm[700:730], pcm[3100:3110]]}},
        {"name": "match_loudness_peak", "inputs": {"function": "match_loudness", "pcm16": pcm[500:540], "ref_rms": None}},
        {"name": "match_loudness_loud_reference", "inputs": {"function": "match_loudness", "pcm16": pcm[500:540], "ref_rms": 0.3}},
    ]


def _pcm_wav(pcm) -> np.ndarray:
    return np.asarray(pcm, np.int16).astype(np.float32) / np.float32(32768.0)


def _post_run(inputs: dict) -> dict:
    from codes.runtime.audio import processing as audio
    from codes.runtime.contract.settings import GenerationSettings

    function = inputs["function"]
    if function == "post_process":
        settings = GenerationSettings(**inputs["settings"])
        wav = audio.post_process(_pcm_wav(inputs["pcm16"]), inputs["ref_rms"], settings, inputs["sample_rate"])
    elif function == "remove_silence":
        wav = audio.remove_silence(_pcm_wav(inputs["pcm16"]), inputs["sample_rate"], inputs["mid_sil_ms"],
                                   inputs["lead_sil_ms"], inputs["trail_sil_ms"])
    elif function == "cross_fade_chunks":
        wav = audio.cross_fade_chunks([_pcm_wav(c) for c in inputs["chunks_pcm16"]], inputs["sample_rate"],
                                      inputs["silence_duration"])
    else:
        wav = audio.match_loudness(_pcm_wav(inputs["pcm16"]), inputs["ref_rms"])
    return {"wav": floats(np.asarray(wav, np.float32))}


STAGES = (
    Stage("text", "Text clean-up, end punctuation, non-verbal tags and long-form chunking over a multilingual list.",
          ("text.cleanup.combine_text", "text.cleanup.add_punctuation", "text.cleanup.split_nonverbal", "text.cleanup.contains_chinese",
           "text.cleanup.chunk_text_punctuation", "text.cleanup.chunk_long_text"),
          ("omnivoice.models.omnivoice._combine_text", "omnivoice.utils.text.add_punctuation",
           "omnivoice.models.omnivoice._tokenize_with_nonverbal_tags (its split)",
           "omnivoice.utils.text.chunk_text_punctuation", "OmniVoice._generate_chunked (its chunk length)"),
          0.0, _text_cases, _text_run),
    Stage("stream_chunks", "Streaming chunks: the whole text at once, and the same text pushed a few characters at a time.",
          ("text.chunks.stream_chunks", "text.chunks.TextStream.push", "text.chunks.TextStream.flush"), ("(ours: upstream streams nothing)",),
          0.0, _stream_cases, _stream_run),
    Stage("settle", "A request settled: language and instruct resolved, target length and speed; refusals as errors.",
          ("request.settle", "text.voice_design.resolve_language", "text.voice_design.resolve_instruct",
           "text.duration.resolve_target_len"),
          ("OmniVoice._preprocess_all", "omnivoice.models.omnivoice._resolve_language",
           "omnivoice.models.omnivoice._resolve_instruct", "OmniVoice._estimate_target_tokens"),
          1e-12, _settle_cases, _settle_run),
    Stage("tokens", "Token ids of the Qwen3 byte-level BPE with OmniVoice's tags (tokenizer.json's sha256 below).",
          ("text.tokenizer.TextTokenizer.encode", "voices.prompt.text_token_ids"),
          ("transformers.AutoTokenizer (Qwen2TokenizerFast)", "omnivoice.models.omnivoice._tokenize_with_nonverbal_tags"),
          0.0, _tokens_cases, _tokens_run),
    Stage("duration", "Each character's weight, and a text's frames from its reference (or the fallback) and speed "
          "or duration.", ("text.duration.char_weight", "text.duration.estimate_frames", "text.duration.resolve_target_len"),
          ("omnivoice.utils.duration.RuleDurationEstimator", "OmniVoice._estimate_target_tokens",
           "OmniVoice._preprocess_all"),
          1e-9, _duration_cases, _duration_run),
    Stage("prompt", "One item's input ids [8, N] and audio mask [N] for plain, design and clone requests, and the CFG "
          "batch of three (attention_mask [2B, 1, S, S] as one string of 0 and 1 per query row, rows in order).",
          ("voices.prompt.build_prompt", "voices.prompt.build_cfg_batch"),
          ("OmniVoice._prepare_inference_inputs", "OmniVoice._generate_iterative (its batch)"),
          0.0, _prompt_cases, _prompt_run),
    Stage("schedule", "The shifted times (float32, bit-equal to upstream) and the cells each step reveals.",
          ("model.decoding.time_steps", "model.decoding.reveal_schedule"),
          ("omnivoice.models.omnivoice._get_time_steps", "OmniVoice._generate_iterative (its schedule)"),
          0.0, _schedule_cases, _schedule_run),
    Stage("reveals", "Each step's reveals given recorded cell tokens and scores: the reveal_count best still-masked "
          "cells, equal scores to the lower flat index (codebook-major).", ("model.decoding.reveal_top_k",),
          ("OmniVoice._generate_iterative (its topk over masked cells)",), 0.0, _reveal_cases, _reveal_run),
    Stage("cell_scores", "The numpy reference of the cell-scoring graphs on a vocabulary of 17: guided log-probs, "
          "a token per cell, and its score, with seeded noise; the Gumbel transform of uniforms.",
          ("model.decoding.cell_scores", "model.decoding.gumbel_noise"),
          ("OmniVoice._predict_tokens_with_scoring", "OmniVoice._generate_iterative (layer penalty, position noise)",
           "omnivoice.models.omnivoice._gumbel_sample",
           "omnivoice.models.omnivoice._filter_top_k"), 1e-4, _cell_cases, _cell_run),
    Stage("noise", "Seeded noise: PCG64's state and raw outputs (hex), numpy's float32 uniforms in draw order, "
          "seed + i per item, and which draws a decode makes in which order.",
          ("model.decoding.RandomNoise", "request.item_noises", "model.decoding.iterative_decode"),
          ("torch.rand_like in OmniVoice._generate_iterative (replaced by numpy's generator)",), 1e-6,
          _noise_cases, _noise_run),
    Stage("resample", "The two resamplers on short clips: torchaudio's sinc (reference clips, audio.resample) and "
          "soxr (the codec's input, audio.codec.HiggsCodec.prepare).", ("audio.processing.resample", "soxr.resample"),
          ("torchaudio.functional.resample (create_voice_clone_prompt)", "HiggsAudioV2TokenizerModel's soxr input"),
          1e-5, _resample_cases, _resample_run),
    Stage("postprocess", f"Post-processing of a short waveform at {POST_RATE} Hz, given as 16-bit samples "
          "(wav = pcm16 / 32768): silence removal, loudness, fades, padding and chunk cross-fades.",
          ("audio.processing.post_process", "audio.processing.remove_silence", "audio.processing.cross_fade_chunks", "audio.processing.match_loudness"),
          ("OmniVoice._post_process_audio", "omnivoice.utils.audio.remove_silence",
           "omnivoice.utils.audio.fade_and_pad_audio", "omnivoice.utils.audio.cross_fade_chunks"),
          1e-6, _post_cases, _post_run),
)


# --- writing and checking ----------------------------------------------------------------------------------------


def build_vector(stage: Stage) -> dict:
    cases = [{"name": case["name"], "inputs": case["inputs"], "expected": stage.run(case["inputs"])}
             for case in stage.cases()]
    header = {"stage": stage.name, "about": stage.about, "runtime": [f"codes.runtime.{f}" if not f.startswith(("soxr", "(")) else f
                                                                       for f in stage.runtime],
              "upstream": list(stage.upstream), "tolerance": stage.tolerance,
              "tolerance_applies_to": "every float of expected, absolute; integers and strings are exact"}
    if stage.name in ("tokens", "prompt"):
        header["tokenizer_sha256"] = tokenizer_sha256()
    return {**header, "cases": cases}


def dumps(vector: dict) -> str:
    """The file's text: the header a key a line, then one case a line, so a change shows as one line's diff."""
    head = {key: value for key, value in vector.items() if key != "cases"}
    lines = [f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}," for key, value in head.items()]
    cases = [f"    {json.dumps(case, ensure_ascii=False, separators=(',', ':'), allow_nan=False)}"
             for case in vector["cases"]]
    return "{\n" + "\n".join(lines) + '\n  "cases": [\n' + ",\n".join(cases) + "\n  ]\n}\n"


def write_vectors(folder: str | Path) -> list[Path]:
    """Every stage's file in `folder`, named <stage>.json."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for stage in STAGES:
        path = folder / f"{stage.name}.json"
        path.write_text(dumps(build_vector(stage)), encoding="utf-8")
        written.append(path)
    return written


def differences(expected, actual, tolerance: float, where: str = "") -> list[str]:
    """Where `actual` differs from `expected` (both in the JSON form) beyond `tolerance` on floats."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            return [f"{where}: keys {sorted(expected)} != {sorted(actual)}"]
        return [d for key in expected for d in differences(expected[key], actual[key], tolerance, f"{where}.{key}")]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: length {len(expected)} != {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, tolerance, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(expected, float) and isinstance(actual, numbers) and not isinstance(actual, bool):
        return [] if abs(expected - actual) <= tolerance else [f"{where}: {expected} != {actual} (tolerance {tolerance})"]
    if type(expected) is not type(actual) or expected != actual:
        return [f"{where}: {expected!r} != {actual!r}"]
    return []


def check_vector(vector: dict) -> list[str]:
    """Each case of a loaded vector run again on this runtime: the differences beyond the vector's tolerance."""
    stage = next((s for s in STAGES if s.name == vector["stage"]), None)
    if stage is None:
        return [f"unknown stage {vector['stage']!r}"]
    found = []
    if "tokenizer_sha256" in vector and vector["tokenizer_sha256"] != tokenizer_sha256():
        found.append(f"{stage.name}: made with tokenizer.json {vector['tokenizer_sha256']}, "
                     f"this runtime's is {tokenizer_sha256()}")
    for case in vector["cases"]:
        actual = json.loads(json.dumps(stage.run(case["inputs"]), allow_nan=False))
        found += differences(case["expected"], actual, vector["tolerance"], f"{stage.name}/{case['name']}")
    return found
