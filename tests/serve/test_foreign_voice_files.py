"""The server with voices from other tools: wyoming-piper voice folders imported with --voices-from (only
read, clips encoded once into our voices folder as the server starts, language folders listed by Wyoming's
describe), upstream's .pt uploaded, dropped in --voices_dir or given
to MCP's save_voice, and any voice exported as upstream's .pt; spoken over HTTP and Wyoming (the official
`wyoming` client). Hostile files are refused naming the voice, and nothing in them runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import time

import httpx
import numpy as np
import pytest
import soundfile
import torch
from helpers.scripts import run_script
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from omnivoice.models.omnivoice import VoiceClonePrompt
from helpers.serving import RATE, Server, free_port
from helpers.synthesis_inputs import reference_clip, write_clip
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

from codes.runtime.request import Voice

WAIT = 120
KITCHEN_TEXT = "This is what the reference clip says"
RVQ = {"ref_audio_tokens": torch.from_numpy(np.random.default_rng(7).integers(0, 1024, (8, 30))),
       "ref_text": "What the cached codes say.", "ref_rms": 0.042}


class _System:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _clip(folder, seed: int):
    folder.mkdir(parents=True)
    write_clip(folder / "ref.wav", reference_clip(24000, seed=seed, peak=0.08), 24000)
    (folder / "ref.txt").write_text(KITCHEN_TEXT + "\n")


@pytest.fixture(scope="module")
def piper(tmp_path_factory):
    """Two wyoming-piper --omnivoice-ref-dir folders, as <DIR>/<language>/<voice>/."""
    root = tmp_path_factory.mktemp("piper")
    first, second = root / "first", root / "second"
    _clip(first / "en_US" / "Kitchen Lady", seed=0)  # no ref.rvq: encoded once, into our folder
    _clip(first / "en_US" / "cached", seed=1)  # a fresh ref.rvq: used as it is
    torch.save(RVQ, first / "en_US" / "cached" / "ref.rvq")
    _clip(first / "en_US" / "stale", seed=2)  # a ref.rvq older than its clip: the clip is encoded
    torch.save(RVQ, first / "en_US" / "stale" / "ref.rvq")
    os.utime(first / "en_US" / "stale" / "ref.rvq", (1, 1))
    _clip(first / "en_US" / "evil", seed=3)  # a fresh ref.rvq that would run a command: refused, clip encoded
    torch.save({**RVQ, "ref_text": _System(f"touch {root / 'pwned'}")}, first / "en_US" / "evil" / "ref.rvq")
    (first / "en_US" / "broken").mkdir()  # a clip that is no audio: a 400 naming the voice when it is used
    (first / "en_US" / "broken" / "ref.wav").write_bytes(b"RIFF but not really a wav")
    (first / "en_US" / "broken" / "ref.txt").write_text("Nothing.")
    (first / "de_DE" / "designer").mkdir(parents=True)
    (first / "de_DE" / "designer" / "instruct.txt").write_text("female, low pitch, british accent\n")
    (first / "en_US" / "alloy").mkdir()  # a built-in's name: skipped
    (first / "en_US" / "alloy" / "instruct.txt").write_text("male")
    (second / "designer").mkdir(parents=True)  # flat layout; the name is taken by the first folder: skipped
    (second / "designer" / "instruct.txt").write_text("male, high pitch")
    (second / "quiet one").mkdir()
    (second / "quiet one" / "instruct.txt").write_text("male, elderly, low pitch")
    return root


def snapshot(root) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def server(served_build, piper, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-voice-files")
    port = free_port()
    piper_before = snapshot(piper)
    srv = Server(served_build, folder / "voices", folder / "server.log", "--voices-from", str(piper / "first"),
                 "--voices-from", str(piper / "second"), "--wyoming-uri", f"tcp://127.0.0.1:{port}",
                 "--mcp-output-dir", str(folder / "out"), "--num-steps", "4")
    srv.wyoming_port, srv.out, srv.piper_before = port, folder / "out", piper_before
    srv.out.mkdir()
    yield srv
    srv.stop()


def http(srv: Server, method: str, path: str, **kwargs) -> httpx.Response:
    return httpx.request(method, f"{srv.url}{path}", timeout=WAIT, **kwargs)


def speak_http(srv: Server, voice: str, text: str = "Hello from an imported voice.", seed: int = 3) -> httpx.Response:
    return http(srv, "POST", "/v1/audio/speech", json={"model": "omnivoice", "input": text, "voice": voice,
                                                       "response_format": "wav", "num_steps": 4, "seed": seed})


def test_imported_folders_are_listed_by_their_folder_names(server):
    listed = {v["id"]: v for v in http(server, "GET", "/v1/audio/voices").json()["voices"]}
    assert {"kitchen-lady", "cached", "stale", "evil"} <= {vid for vid, v in listed.items() if v["kind"] == "imported"}
    assert listed["designer"] == {"id": "designer", "name": "designer", "kind": "design",
                                  "instruct": "female, low pitch, british accent", "language": "de_DE"}
    assert listed["kitchen-lady"] == {"id": "kitchen-lady", "name": "kitchen-lady", "kind": "imported",
                                      "language": "en_US"}
    assert listed["quiet-one"] == {"id": "quiet-one", "name": "quiet-one", "kind": "design",
                                   "instruct": "male, elderly, low pitch"}  # a flat folder names no language
    assert listed["alloy"]["instruct"] != "male"  # the built-in stays
    log = "\n".join(server.log_lines())
    assert "skipping" in log and "'designer' is taken" in log and "built-in voice" in log


def test_imported_clips_are_encoded_as_the_server_starts_and_health_says_when(served_build, piper, tmp_path):
    """Before any request names them, so the first one pays nothing for its clip; /health stays 200 and
    counts the clips still to encode."""
    srv = Server(served_build, tmp_path / "voices", tmp_path / "server.log", "--voices-from", str(piper / "first"))
    try:
        deadline = time.monotonic() + WAIT
        while True:
            health = http(srv, "GET", "/health")
            assert health.status_code == 200 and health.json()["status"] == "ok", health.text
            assert {"outstanding_items", "requests_in_flight", "max_batch", "max_queue"} <= set(health.json())
            if health.json()["voices"]["encoding"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)

        def encoded() -> list[str]:
            return [line for line in srv.log_lines() if "--voices-from: encoded" in line]

        # six voices (alloy is skipped); kitchen-lady, stale and evil are encoded, cached has its ref.rvq,
        # broken fails (and is refused when named)
        assert health.json()["voices"] == {"imported": 6, "encoding": 0, "failed": 1}
        assert len(list((srv.voices_dir / "imported").glob("*.npz"))) == 3 and len(encoded()) == 3
        assert not srv.request_lines()  # no request asked for them
        assert speak_http(srv, "kitchen-lady").status_code == 200
        assert len(encoded()) == 3 and len(srv.request_lines()) == 1  # the request encoded nothing
    finally:
        srv.stop()


def test_imported_voices_speak_over_http_and_dir_is_never_written(server, piper, served_build, tmp_path):
    for voice in ("kitchen-lady", "cached", "stale", "evil", "designer", "quiet-one"):
        spoken = speak_http(server, voice)
        assert spoken.status_code == 200, (voice, spoken.text)
        assert len(soundfile.read(io.BytesIO(spoken.content))[0]) > 0
    broken = speak_http(server, "broken")
    assert broken.status_code == 400 and "imported voice 'broken' cannot be used" in broken.json()["error"]["message"]
    assert str(piper) not in broken.json()["error"]["message"]
    assert snapshot(piper) == server.piper_before  # only read
    assert not (piper / "pwned").exists()
    assert "evil/ref.rvq" in "\n".join(server.log_lines()) and "posix.system" in "\n".join(server.log_lines())
    # the three encoded clips (not the one with a fresh ref.rvq) are kept in our voices folder, by content hash
    cached = sorted((server.voices_dir / "imported").glob("*.npz"))
    assert len(cached) == 3
    # an imported clip speaks as inference.py cloning the same clip with the same seed
    text = "Cloned speech from the saved voice."
    served, _ = soundfile.read(io.BytesIO(speak_http(server, "kitchen-lady", text, seed=5).content), dtype="int16")
    clip = piper / "first" / "en_US" / "Kitchen Lady" / "ref.wav"
    run_script("inference.py", "--model_dir", served_build, "--ref_audio", clip, "--ref_text", KITCHEN_TEXT,
               "--text", text, "--seed", 5, "--num_steps", 4, "--output", tmp_path / "cli.wav", "--quiet", check=True)
    np.testing.assert_array_equal(served, soundfile.read(tmp_path / "cli.wav", dtype="int16")[0])


def test_a_fresh_ref_rvq_is_used_as_it_is_and_every_voice_exports_as_upstream_loads_it(server, tmp_path):
    exported = http(server, "GET", "/v1/audio/voices/cached", params={"format": "pt"})
    assert exported.status_code == 200 and 'filename="cached.pt"' in exported.headers["content-disposition"]
    (tmp_path / "cached.pt").write_bytes(exported.content)
    prompt = VoiceClonePrompt.load(str(tmp_path / "cached.pt"))
    assert torch.equal(prompt.ref_audio_tokens, RVQ["ref_audio_tokens"])
    assert prompt.ref_text == RVQ["ref_text"] and prompt.ref_rms == RVQ["ref_rms"]
    # a design voice exports its pin; ours (.npz) as well
    design = http(server, "GET", "/v1/audio/voices/designer", params={"format": "pt"})
    (tmp_path / "designer.pt").write_bytes(design.content)
    assert VoiceClonePrompt.load(str(tmp_path / "designer.pt")).ref_rms is None  # a pin sets no loudness
    npz = http(server, "GET", "/v1/audio/voices/stale", params={"format": "npz"})
    assert Voice.from_bytes(npz.content, "stale").text == KITCHEN_TEXT + "."
    assert http(server, "GET", "/v1/audio/voices/nobody").status_code == 404
    assert http(server, "GET", "/v1/audio/voices/cached", params={"format": "exe"}).status_code == 400


def test_wyoming_lists_and_speaks_imported_voices(server):
    async def talk():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(Describe().event())
            info = Info.from_event(await client.read_event())
            spoken = {}
            for name in ("kitchen-lady", "designer"):
                await client.write_event(Synthesize(text="Hello from Home Assistant.",
                                                    voice=SynthesizeVoice(name=name)).event())
                chunks = []
                while True:
                    event = await client.read_event()
                    assert event is not None and event.type != "error", event
                    if AudioChunk.is_type(event.type):
                        chunks.append(AudioChunk.from_event(event).audio)
                    if event.type == "audio-stop":
                        break
                spoken[name] = b"".join(chunks)
            return info, spoken

    info, spoken = asyncio.run(asyncio.wait_for(talk(), WAIT))
    languages = {voice.name: voice.languages for voice in info.tts[0].voices}
    assert {"kitchen-lady", "cached", "designer", "quiet-one"} <= set(languages)
    # a voice from <DIR>/<language>/<voice>/ is offered in its folder's language alone, as wyoming-piper does
    assert languages["kitchen-lady"] == languages["cached"] == ["en_US"] and languages["designer"] == ["de_DE"]
    assert "en" in languages["quiet-one"] and "de" in languages["quiet-one"]  # no language folder: Assist's
    assert all(len(audio) > RATE // 10 for audio in spoken.values())


def test_upstream_pt_uploads_and_round_trips_exactly(server, tmp_path):
    tokens = torch.from_numpy(np.random.default_rng(3).integers(0, 1024, (8, 40)))
    VoiceClonePrompt(tokens, "An upstream voice.", 0.061).save(str(tmp_path / "upstream.pt"))
    made = http(server, "POST", "/v1/audio/voices", data={"name": "From Upstream"},
                files={"file": ("upstream.pt", (tmp_path / "upstream.pt").read_bytes())})
    assert made.status_code == 200, made.text
    assert made.json()["id"] == "from-upstream" and (server.voices_dir / "from-upstream.npz").is_file()
    assert speak_http(server, "from-upstream").status_code == 200
    back = http(server, "GET", "/v1/audio/voices/from-upstream", params={"format": "pt"}).content
    (tmp_path / "back.pt").write_bytes(back)
    prompt = VoiceClonePrompt.load(str(tmp_path / "back.pt"))
    assert torch.equal(prompt.ref_audio_tokens, tokens) and prompt.ref_text == "An upstream voice."
    assert prompt.ref_rms == 0.061
    # dropped into --voices_dir as it is, a .pt is a saved voice too
    (server.voices_dir / "dropped.pt").write_bytes((tmp_path / "upstream.pt").read_bytes())
    assert speak_http(server, "dropped").status_code == 200
    taken = http(server, "POST", "/v1/audio/voices", data={"name": "kitchen lady"},
                 files={"file": ("x.pt", (tmp_path / "upstream.pt").read_bytes())})
    assert taken.status_code == 409  # an imported voice's name, as any other taken name
    imported = http(server, "DELETE", "/v1/audio/voices/kitchen-lady")
    assert imported.status_code == 400 and "--voices-from" in imported.json()["error"]["message"]
    assert http(server, "DELETE", "/v1/audio/voices/dropped").json() == {"id": "dropped", "deleted": True}


def test_hostile_voice_files_are_a_400_naming_the_voice_and_nothing_runs(server, tmp_path):
    marker = tmp_path / "pwned"
    evil = io.BytesIO()
    torch.save({**RVQ, "ref_audio_tokens": _System(f"touch {marker}")}, evil)
    refused = http(server, "POST", "/v1/audio/voices", data={"name": "trojan"},
                   files={"file": ("trojan.pt", evil.getvalue())})
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert "'trojan'" in message and "posix.system" in message and "\n" not in message
    assert not (server.voices_dir / "trojan.npz").exists()
    (server.voices_dir / "planted.pt").write_bytes(evil.getvalue())  # planted in the folder: refused when used
    used = speak_http(server, "planted")
    assert used.status_code == 400 and "'planted'" in used.json()["error"]["message"]
    assert str(server.voices_dir) not in used.json()["error"]["message"]
    bomb = http(server, "POST", "/v1/audio/voices", data={"name": "short"},
                files={"file": ("short.pt", evil.getvalue()[: len(evil.getvalue()) // 2])})
    assert bomb.status_code == 400 and "truncated" in bomb.json()["error"]["message"]
    assert not marker.exists() and server.proc.poll() is None
    (server.voices_dir / "planted.pt").unlink()
    # a voice file is held to the limits an uploaded clip and its transcript are (30 s, 1000 characters)
    for name, frames, text, expected in (("long", 31 * 25, "Hi.", "--max-upload-seconds"),
                                         ("wordy", 25, "word " * 300, "--max-transcript-chars")):
        VoiceClonePrompt(torch.zeros(8, frames, dtype=torch.int64), text, 0.1).save(str(tmp_path / f"{name}.pt"))
        data = (tmp_path / f"{name}.pt").read_bytes()
        over = http(server, "POST", "/v1/audio/voices", files={"file": (f"{name}.pt", data)})
        assert over.status_code == 400 and expected in over.json()["error"]["message"], over.text
        assert not (server.voices_dir / f"{name}.npz").exists()


def test_mcp_save_voice_takes_a_pt_file_without_a_transcript(server, tmp_path):
    VoiceClonePrompt(RVQ["ref_audio_tokens"], "An agent's voice.", 0.07).save(str(server.out / "agent.pt"))

    async def save():
        async with Client(streamable_http_client(f"{server.url}/mcp")) as client:
            saved = await client.call_tool("save_voice", {"audio_path": str(server.out / "agent.pt"),
                                                          "name": "agent"})
            spoken = await client.call_tool("speak", {"text": "Cloned.", "voice": "agent", "num_steps": 4})
            return saved, spoken

    saved, spoken = asyncio.run(asyncio.wait_for(save(), WAIT))
    assert not saved.is_error, saved.content[0].text
    assert not spoken.is_error and spoken.content[0].type == "audio"
    voice = Voice.load(server.voices_dir / "agent.npz")
    assert np.array_equal(voice.codes, RVQ["ref_audio_tokens"].numpy()) and voice.rms == 0.07


def test_voices_from_a_missing_folder_is_one_error_line(served_build, tmp_path):
    result = run_script("serve.py", "--model_dir", served_build, "--voices_dir", tmp_path / "voices",
                        "--voices-from", tmp_path / "missing", "--port", str(free_port()))
    assert result.returncode == 2 and "--voices-from" in result.stderr.strip().splitlines()[-1]
