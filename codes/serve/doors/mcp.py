"""The MCP door: tools for AI agents (the official `mcp` SDK) onto the same service.

Tools: `speak` (audio as MCP audio content, base64 with its MIME type; with --mcp-output-dir also a
file there, named by the server, never over an existing one), `speak_script` (a dialogue or subtitles in
several voices into one track, with its captions), `list_voices`, `save_voice` (a clip
that lies under --voices_dir or --mcp-output-dir). Bad arguments are tool errors (isError), with
the same one-line messages as the HTTP API. Transports: streamable HTTP at /mcp on the HTTP server
(behind --api-key), or stdio (serve.py --mcp-stdio).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from pathlib import Path

import numpy as np
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import AudioContent, TextContent

from codes.common.errors import UserError
from codes.common.fileio import atomic_path
from codes.common.version import VERSION
from codes.runtime.contract.specs import SAMPLE_RATE
from codes.serve.core.encode import CONTENT_TYPES, encode_whole
from codes.serve.core.lifecycle import ScriptRequest, SpeechRequest
from codes.serve.core.lifecycle import save_voice as store_voice  # the tool's own name is save_voice
from codes.serve.core.params import parse_script_request, parse_speech
from codes.serve.core.script_stream import script_summary
from codes.serve.core.state import ServerState
from codes.serve.edge.errors import REFUSALS, as_request_error
from codes.serve.voices.uploads import check_upload_size

logger = logging.getLogger("omnivoice.serve")

PATH = "/mcp"
INSTRUCTIONS = ("Speak text aloud or make voice files with OmniVoice (600+ languages). Voices: list_voices; "
                "a built-in name such as alloy, or a saved voice; save_voice adds one from a reference clip.")


@contextlib.contextmanager
def _tool_errors():
    """Every refusal as a tool error the agent reads, never a crashed call."""
    try:
        yield
    except REFUSALS as exc:
        raise ToolError(as_request_error(exc).message) from None


def _inside(path: Path, folders: list[Path]) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(folder.resolve()) for folder in folders)


def build(state: ServerState, output_dir: Path | None = None) -> MCPServer:
    server = MCPServer(name="omnivoice-onnx", version=VERSION, instructions=INSTRUCTIONS)
    limits = state.config.limits

    @server.tool()
    async def speak(text: str, voice: str = "alloy", language: str | None = None, instructions: str | None = None,
                    speed: float | None = None, num_steps: int | None = None, seed: int | None = None,
                    response_format: str = "wav", normalize_text: bool | None = None, denoise: bool | None = None,
                    preprocess_prompt: bool | None = None, postprocess_output: bool | None = None,
                    timings: bool = False, word_timings: bool = False) -> list[AudioContent | TextContent]:
        """Speak `text` and return the audio. voice: a built-in name (alloy, ash, ...) or a saved voice's
        id; language: an id or name (default: detected); instructions: a voice design for a built-in
        voice ("female, low pitch, british accent"); speed 0.25-4; num_steps: decoding steps (default
        32, fewer is faster); seed: the same seed gives the same audio; response_format: wav, mp3,
        opus, aac, flac or pcm; normalize_text: numbers, dates and currency said as words (default: the
        server's); denoise, preprocess_prompt, postprocess_output: upstream's switches (default: true);
        timings: also return {"timings": [{"text", "start", "end"}, ...]}, when each piece of the text
        (a clause or sentence) is heard, in seconds from the audio's start; word_timings: each timing also
        has "words": [{"word", "start", "end"}], where the server's build can align (it costs a
        recogniser's pass per piece)."""
        with _tool_errors():
            fields = {"input": text, "voice": voice, "language": language, "instructions": instructions,
                      "speed": speed, "num_steps": num_steps, "seed": seed, "response_format": response_format,
                      "normalize_text": normalize_text, "denoise": denoise, "preprocess_prompt": preprocess_prompt,
                      "postprocess_output": postprocess_output, "word_timings": word_timings and timings}
            params = parse_speech({k: v for k, v in fields.items() if v is not None}, state.config.limits,
                                  state.config.settings, normalize=state.config.normalize_text)
            async with SpeechRequest(state, params, "mcp") as speaking:
                pieces = [piece async for piece in speaking.spoken()]
                data = await asyncio.get_running_loop().run_in_executor(
                    speaking.model.encode_pool, encode_whole, np.concatenate([piece.wav for piece in pieces]),
                    params.response_format, SAMPLE_RATE)
            seconds = sum(len(piece.wav) for piece in pieces) / SAMPLE_RATE
            summary = f"{seconds:.2f} s of speech, voice {params.voice}, {params.response_format}"
            content: list[AudioContent | TextContent] = [
                AudioContent(data=base64.b64encode(data).decode("ascii"),
                             mime_type=CONTENT_TYPES[params.response_format])]
            if output_dir is not None:
                path = await asyncio.get_running_loop().run_in_executor(
                    None, _write_new, output_dir, speaking.job.request_id, params.response_format, data)
                summary += f", written to {path}"
            content.append(TextContent(text=summary))
            if timings:
                content.append(TextContent(text=json.dumps({"timings": [await piece.timed() for piece in pieces]})))
            return content

    @server.tool()
    async def speak_script(script: str, speakers: dict[str, str] | None = None, format: str = "text",  # noqa: A002
                           gap: float | None = None, overlap: str | None = None, language: str | None = None,
                           speed: float | None = None, num_steps: int | None = None, seed: int | None = None,
                           response_format: str = "wav", captions: str = "srt", caption_words: bool = False,
                           normalize_text: bool | None = None,
                           postprocess_output: bool | None = None) -> list[AudioContent | TextContent]:
        """Speak a whole script in several voices into one track, with its captions. script: a dialogue
        ("Alice: Hello. <break time=\"500ms\"/> Bob: Hi."; a line starting with a declared speaker's name and a
        colon switches speaker), or subtitles to dub cue by cue in their time slots (format srt or vtt), or
        JSONL segments, or a book read chapter by chapter (format markdown, html, book for plain text, or epub
        with the file's bytes in base64; a speaker named "Dialogue" reads what is in quotation marks); format:
        text, srt, vtt, jsonl, markdown, html, book or epub. speakers: name -> voice, in order (the first speaks
        what no speaker is marked on): a voice from list_voices, "instruct:female, low pitch" for a designed
        voice, or "auto". gap: seconds of silence where the speaker changes (dialogues); overlap: what
        overlapping cues do (error, trim, mix); captions: srt, vtt or none; caption_words: captions and segments
        word by word, where the server's build can align. The other arguments are speak's,
        for every segment. Returns the audio, a summary with each segment's start and end in seconds, and the
        captions."""
        with _tool_errors():
            fields = {"script": script, "speakers": speakers, "format": format, "gap": gap, "overlap": overlap,
                      "language": language, "speed": speed, "num_steps": num_steps, "seed": seed,
                      "response_format": response_format, "captions": captions, "caption_words": caption_words,
                      "normalize_text": normalize_text,
                      "postprocess_output": postprocess_output}
            params = parse_script_request({k: v for k, v in fields.items() if v is not None}, state.config.limits,
                                          state.config.settings, normalize=state.config.normalize_text)
            loop = asyncio.get_running_loop()
            async with ScriptRequest(state, params, "mcp") as scripting:
                rendered = await scripting.whole()
                data = await loop.run_in_executor(scripting.model.encode_pool, encode_whole, rendered.audio,
                                                  params.response_format, SAMPLE_RATE)
            summary = script_summary(rendered, params.response_format, params.captions, scripting.book)
            caption_text = summary.pop("captions", None)
            if output_dir is not None:
                request_id = scripting.job.request_id
                written = [await loop.run_in_executor(None, _write_new, output_dir, request_id,
                                                      params.response_format, data, "script")]
                if caption_text is not None:
                    written.append(await loop.run_in_executor(None, _write_new, output_dir, request_id, params.captions,
                                                              caption_text.encode("utf-8"), "script"))
                summary["written"] = [str(path) for path in written]
            content: list[AudioContent | TextContent] = [
                AudioContent(data=base64.b64encode(data).decode("ascii"),
                             mime_type=CONTENT_TYPES[params.response_format]),
                TextContent(text=json.dumps(summary))]
            if caption_text is not None:
                content.append(TextContent(text=caption_text))
            return content

    @server.tool()
    async def list_voices() -> list[dict]:
        """The voices speak accepts: built-in design voices (with their voice design) and saved voices."""
        return await asyncio.get_running_loop().run_in_executor(None, state.voices.book.listing)

    @server.tool()
    async def save_voice(audio_path: str, name: str, transcript: str = "") -> str:
        """Save a voice to clone: `audio_path`, a reference clip of a few seconds (WAV, FLAC, MP3, ...)
        lying under the server's voices or output folder, or a voice file (.pt from upstream's
        VoiceClonePrompt.save, .npz from inference.py --save_voice, a wyoming-piper ref.rvq);
        `transcript`, what the clip says (a voice file carries its own; left empty, the server transcribes
        the clip where its build has a recogniser, and the answer says what it heard); `name`, the new voice's id
        (letters, digits, - and _). Returns the id to pass to speak as voice."""
        with _tool_errors():
            folders = [state.config.voices_dir, *([output_dir] if output_dir else [])]
            path = Path(audio_path)
            if not _inside(path, folders) or not path.is_file():
                raise UserError(f"audio_path {audio_path!r} is not a file under "
                                f"{' or '.join(str(f) for f in folders)}; put the clip there first")
            check_upload_size(path.stat().st_size, limits, "audio_path")  # before it is read
            vid, voice = await store_voice(state, lambda: asyncio.to_thread(path.read_bytes), path.name, name,
                                           transcript)
            return f"saved voice {vid!r} (transcript: {voice.text!r}); use it as speak's voice"

    return server


def _write_new(folder: Path, request_id: int, suffix: str, data: bytes, kind: str = "speech") -> Path:
    """The file under `folder`, whole or not at all, under a name no earlier file has."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        path = folder / f"{kind}-{stamp}-{request_id}{f'-{attempt}' if attempt else ''}.{suffix}"
        try:
            with atomic_path(path, exclusive=True) as tmp:  # never replaces a file, even one made meanwhile
                tmp.write_bytes(data)
            return path
        except FileExistsError:
            continue
    raise UserError(f"no free file name in {folder}")


class McpDoor:
    """MCP over streamable HTTP at /mcp, inside the HTTP server (its session manager runs with it)."""

    def __init__(self, state: ServerState, output_dir: Path | None, host: str):
        self.server = build(state, output_dir)
        # the SDK's own Host and Origin checks (loopback names only) are off: app.py's guard applies the
        # server's one rule (codes/serve/edge/origins.py) to /mcp before the SDK sees a request, --allow-host included
        self.app = self.server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, host=host,
                                                   transport_security=TransportSecuritySettings(
                                                       enable_dns_rebinding_protection=False))

    @contextlib.asynccontextmanager
    async def running(self):
        async with self.server.session_manager.run():
            yield

    def handles(self, path: str) -> bool:
        return path == PATH or path.startswith(PATH + "/")


async def run_stdio(state: ServerState, output_dir: Path | None) -> None:
    await build(state, output_dir).run_stdio_async()
