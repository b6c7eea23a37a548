"""Upstream OmniVoice's README examples, as upstream's users write them (tests/runtime/test_api.py runs this file).

The test runs it twice: as it stands, with upstream's package on the checkpoint, and with the two marked
lines changed (the import, and the model path to a build), in a venv without torch. Each run saves every
returned audio to the .npz named by argv[2]; the clip to clone is argv[3], the folder for files argv[4].
The only addition to upstream's examples: position_temperature=0, so decoding draws no noise and both
sides can be compared item for item.
"""

import sys

import numpy as np
import soundfile as sf

from omnivoice import OmniVoice, OmniVoiceGenerationConfig, VoiceClonePrompt  # the import
model_path = sys.argv[1]  # the model path

out_path, ref_wav, workdir = sys.argv[2], sys.argv[3], sys.argv[4]
DETERMINISTIC = dict(position_temperature=0.0)
results = {}

model = OmniVoice.from_pretrained(model_path, device_map="cpu", attn_implementation="sdpa")
assert model.sampling_rate == 24000
assert len(model.supported_language_ids()) == 646 and "en" in model.supported_language_ids()
assert len(model.supported_language_names()) == 646 and "english" in model.supported_language_names()

# Voice cloning
audio = model.generate(
    text="Hello, this is a test of zero-shot voice cloning.",
    ref_audio=ref_wav,
    ref_text="Transcription of the reference audio.",
    **DETERMINISTIC,
)
sf.write(f"{workdir}/out.wav", audio[0], 24000)
results["clone"] = audio

# Reusing a cloned voice across sessions
prompt = model.create_voice_clone_prompt(ref_audio=ref_wav, ref_text="Transcription of the reference audio.")
prompt.save(f"{workdir}/my_voice.pt")
prompt = VoiceClonePrompt.load(f"{workdir}/my_voice.pt")
results["prompt_tokens"] = [np.asarray(prompt.ref_audio_tokens)]
results["prompt_text"] = [np.array(prompt.ref_text)]
results["prompt_rms"] = [np.array(prompt.ref_rms)]
results["reuse"] = model.generate(text="Hello again!", voice_clone_prompt=prompt, **DETERMINISTIC)

# A clip given as (waveform, sample_rate)
waveform, sample_rate = sf.read(ref_wav, dtype="float32")
results["tuple"] = model.generate(text="A clip read by hand.", ref_audio=(waveform, sample_rate),
                                  ref_text="Transcription of the reference audio.", **DETERMINISTIC)

# Normalization of numbers
results["normalize"] = model.generate(text="I have 2345 apples.", normalize_text=True, **DETERMINISTIC)

# Voice design
results["design"] = model.generate(
    text="Hello, this is a test of zero-shot voice design.",
    instruct="female, low pitch, british accent",
    **DETERMINISTIC,
)

# Auto voice
results["auto"] = model.generate(text="This is a sentence without any voice prompt.", **DETERMINISTIC)

# Generation parameters
results["parameters"] = model.generate(
    text="Some text to say, at a fixed length.",
    num_step=16,
    speed=1.0,
    duration=3.0,
    **DETERMINISTIC,
)
config = OmniVoiceGenerationConfig(num_step=8, guidance_scale=1.5, position_temperature=0.0,
                                   postprocess_output=False, denoise=False)
results["config"] = model.generate(text="A config object, made once.", ref_audio=ref_wav,
                                   ref_text="Transcription of the reference audio.", generation_config=config)

# Non-verbal and pronunciation control
results["nonverbal"] = model.generate(text="[laughter] You really got me. I didn't see that coming at all.",
                                      **DETERMINISTIC)
results["pinyin"] = model.generate(text="这批货物打ZHE2出售后他严重SHE2本了，再也经不起ZHE1腾了。", **DETERMINISTIC)
results["cmu"] = model.generate(text="He plays the [B EY1 S] guitar while catching a [B AE1 S] fish.", **DETERMINISTIC)

# A batch: per-item languages, voices and lengths
results["batch"] = model.generate(
    text=["First item, in English.", "第二个，中文。", "Le troisième, en français, avec 3 pommes."],
    language=["en", "Chinese", "fr"],
    voice_clone_prompt=[prompt, prompt, prompt],
    speed=[1.0, 1.2, 0.9],
    normalize_text=True,
    **DETERMINISTIC,
)
results["batch_voices"] = model.generate(
    text=["One voice made from the clip.", "Another, designed.", "A third from the clip again."],
    ref_audio=[ref_wav, ref_wav, ref_wav],
    ref_text=["Transcription of the reference audio.", "The same clip, another transcript.",
              "Transcription of the reference audio."],
    duration=[None, 2.0, None],
    **DETERMINISTIC,
)

for name, audios in results.items():
    assert isinstance(audios, list), name
np.savez(out_path, **{f"{name}.{i}": np.asarray(a) for name, audios in results.items() for i, a in enumerate(audios)})
print("ok", len(results))
