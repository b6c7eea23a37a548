"""Upstream's saved voice prompts (.pt), read and written without torch and without trusting pickle.

Upstream 0.2.1's `VoiceClonePrompt.save` is a `torch.save` of {"format_version": 1, "ref_audio_tokens":
int64 [8, T], "ref_text": str, "ref_rms": float}; wyoming-piper's OmniVoice backend caches the same dict
without "format_version" as `ref.rvq` beside a voice's clip. torch.save writes a zip:
`<archive>/data.pkl`, a protocol-2 pickle in which each tensor is a call of
`torch._utils._rebuild_tensor_v2` on a storage named by a persistent id ("storage", torch.LongStorage,
key, location, numel), and `<archive>/data/<key>`, each storage's raw bytes, plus `byteorder` and `version`.

Reading runs that pickle under an unpickler that knows only the globals a dict of tensors needs, each
mapped to a function here that builds a numpy array from a storage's bytes; any other global is refused
by name before anything is called, so nothing in the file is ever executed. Every size is checked before
it is read: the file, each zip member (declared and, for a compressed one, as it inflates), each
storage's claimed element count.
Writing emits the same layout (the pickle's opcodes by hand, since pickling torch's globals by name
would import torch), so `torch.load(weights_only=True)` and upstream's `VoiceClonePrompt.load` read it.
"""

from __future__ import annotations

import io
import math
import pickle
import re
import struct
import zipfile

import numpy as np

from codes.common.errors import UserError
from codes.runtime.contract.specs import AUDIO_VOCAB_SIZE, FRAME_RATE, NUM_CODEBOOKS

FORMAT_VERSION = 1  # upstream's _VOICE_CLONE_PROMPT_FORMAT_VERSION
CODEBOOK_SIZE = AUDIO_VOCAB_SIZE - 1  # codes 0..1023; 1024 is the mask id, never in a prompt
MAX_FRAMES = 10 * 60 * FRAME_RATE  # ten minutes of reference: upstream advises 3-10 s
MAX_ELEMENTS = NUM_CODEBOOKS * MAX_FRAMES
MAX_PICKLE_BYTES = 1 << 20  # the dict's pickle: a transcript and a few numbers
MAX_MEMBERS = 64
MAX_FILE_BYTES = 4 * MAX_PICKLE_BYTES + MAX_ELEMENTS * 8  # under 6 MB: far past any real prompt
ZIP_MAGIC = b"PK\x03\x04"
ALIGNMENT = 64  # torch aligns each storage's bytes in the file (for mmap=True)
SUFFIX = ".pt"

# torch's storage type names -> the numpy dtype of their elements (little-endian; byteorder may flip them).
STORAGE_DTYPES = {
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1", "ByteStorage": "u1",
    "BoolStorage": "?", "DoubleStorage": "<f8", "FloatStorage": "<f4", "HalfStorage": "<f2",
}


class PromptFileError(UserError):
    """A voice file that is not one, or not a safe one; the message names the file and the problem,
    and `problem` holds the problem alone."""

    problem = ""


# Every object the unpickler hands to the pickle is a tuple subclass without slots: a pickle's BUILD
# cannot set an attribute on one (so nothing it does outlives its own load), and no opcode takes one apart.

class _Global(tuple):
    """What find_class gives for an allowed function: (function,), called with the pickle's arguments."""

    __slots__ = ()

    def __call__(self, *args):
        return self[0](*args)


class _StorageType(tuple):
    """What find_class gives for torch.<X>Storage: (name, numpy dtype); never called."""

    __slots__ = ()

    @property
    def dtype(self) -> np.dtype:
        return self[1]


class _Storage(tuple):
    """A storage's elements: (numpy array,), read from the zip."""

    __slots__ = ()

    @property
    def array(self) -> np.ndarray:
        return self[0]


class _Tensor(tuple):
    """A rebuilt tensor: (numpy array,)."""

    __slots__ = ()


def _refuse(what: str):
    raise PromptFileError(what)


def _empty_ordered_dict(*args):
    """collections.OrderedDict(): a tensor's backward hooks, or the dict torch saves (items come after)."""
    if args:
        _refuse("an OrderedDict built from arguments (torch.save never writes one)")
    return {}


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    """torch._utils._rebuild_tensor_v2, as a numpy array copied out of the storage after bounds checks."""
    if not isinstance(storage, _Storage):
        _refuse("a tensor without a storage")
    ints = (storage_offset, *size, *stride) if isinstance(size, tuple) and isinstance(stride, tuple) else None
    if ints is None or len(size) != len(stride) or len(size) > 4 or not all(type(v) is int and v >= 0 for v in ints):
        _refuse("a tensor with a malformed shape or stride")
    if backward_hooks or metadata:
        _refuse("a tensor with hooks or metadata (torch.save of plain tokens has none)")
    if math.prod(size) > MAX_ELEMENTS:
        _refuse(f"a tensor of shape {list(size)}, past the {MAX_ELEMENTS} elements a voice's codes may have")
    if math.prod(size) and storage_offset + sum((n - 1) * s for n, s in zip(size, stride)) >= storage.array.size:
        _refuse(f"a tensor of shape {list(size)} that reaches past its storage of {storage.array.size} elements")
    if not math.prod(size):
        return _Tensor((np.zeros(size, storage.array.dtype),))
    item = storage.array.itemsize
    view = np.lib.stride_tricks.as_strided(storage.array[storage_offset:], shape=size,
                                           strides=tuple(s * item for s in stride), writeable=False)
    return _Tensor((np.array(view, dtype=storage.array.dtype.newbyteorder("=")),))


ALLOWED_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"): _Global((_rebuild_tensor_v2,)),
    ("collections", "OrderedDict"): _Global((_empty_ordered_dict,)),
    **{("torch", name): _StorageType((name, np.dtype(dtype))) for name, dtype in STORAGE_DTYPES.items()},
}


class _Unpickler(pickle.Unpickler):
    """Knows ALLOWED_GLOBALS and nothing else; storages come from the zip, read only within the caps."""

    def __init__(self, archive: _Archive):
        super().__init__(io.BytesIO(archive.pickle_bytes))
        self.archive = archive
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module, name):
        target = ALLOWED_GLOBALS.get((module, name))
        if target is None:
            _refuse(f"its pickle asks for the global {module}.{name}, which a voice prompt never needs "
                    "(refused, nothing was run)")
        return target

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
                and isinstance(pid[2], str) and isinstance(pid[3], str) and type(pid[4]) is int):
            _refuse("a persistent id that is not a torch storage")
        _, storage_type, key, _location, numel = pid
        if key not in self.storages:
            self.storages[key] = _Storage((self.archive.storage(key, storage_type.dtype, numel),))
        return self.storages[key]


class _Zip:
    """A voice file's zip, its members checked before any is read."""

    def __init__(self, data: bytes):
        if len(data) > MAX_FILE_BYTES:
            _refuse(f"it is {len(data)} bytes, past the {MAX_FILE_BYTES} a voice file may be")
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            members = self.zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError):
            _refuse("it is a damaged or truncated zip")
        if len(members) > MAX_MEMBERS:
            _refuse(f"its zip holds {len(members)} members; a voice file has fewer than ten")
        self.members = {m.filename: m for m in members}

    def read(self, name: str, most: int) -> bytes:
        """A member's bytes, refused from its declared size, and read no further than that (a member
        that inflates past what it declares fails its CRC check instead of filling memory)."""
        member = self.members.get(name)
        if member is None:
            _refuse(f"its zip has no member {name}")
        if member.file_size > most:
            _refuse(f"its member {name} claims {member.file_size} bytes, past the {most} it may hold")
        try:
            with self.zip.open(member) as stream:
                data = stream.read(most + 1)
        except (zipfile.BadZipFile, NotImplementedError, ValueError, OSError, EOFError, RuntimeError) as exc:
            _refuse(f"its member {name} cannot be read ({_first_line(exc)}); the zip is damaged")
        if len(data) != member.file_size:
            _refuse(f"its member {name} holds {len(data)} bytes where it declares {member.file_size}")
        return data


class _Archive(_Zip):
    """torch.save's zip."""

    def __init__(self, data: bytes):
        super().__init__(data)
        pickles = [n for n in self.members if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pickles) != 1:
            _refuse("it is a zip without exactly one data.pkl, so not a torch.save file")
        self.prefix = pickles[0][: -len("data.pkl")]
        order = self._small("byteorder", b"little")
        if order not in (b"little", b"big"):
            _refuse(f"its byteorder is {order[:16]!r}, neither little nor big")
        self.big_endian = order == b"big"
        self.pickle_bytes = self.read(pickles[0], MAX_PICKLE_BYTES)

    def _small(self, name: str, default: bytes) -> bytes:
        return self.read(self.prefix + name, 16).strip() if self.prefix + name in self.members else default

    def storage(self, key: str, dtype: np.dtype, numel: int) -> np.ndarray:
        if not re.fullmatch(r"[0-9]{1,9}", key):
            _refuse(f"a storage key {key[:20]!r} that is not a number")
        if not 0 <= numel <= MAX_ELEMENTS:  # before a byte of it is read
            _refuse(f"a storage that claims {numel} elements ({numel * dtype.itemsize} bytes), past the "
                    f"{MAX_ELEMENTS} a voice's codes may have ({MAX_FRAMES // FRAME_RATE // 60} minutes)")
        raw = self.read(f"{self.prefix}data/{key}", numel * dtype.itemsize)
        if len(raw) != numel * dtype.itemsize:
            _refuse(f"its storage {key} holds {len(raw)} bytes for {numel} elements of {dtype.itemsize}")
        return np.frombuffer(raw, dtype.newbyteorder(">" if self.big_endian else "<") if dtype.itemsize > 1 else dtype)


def is_prompt_file(data: bytes) -> bool:
    """Whether `data` looks like a torch.save zip (a data.pkl inside), as opposed to our .npz."""
    if not data.startswith(ZIP_MAGIC):
        return False
    try:
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return b"data.pkl" in data[:4096]  # a truncated torch file: still ours to refuse with a reason
    return any(n == "data.pkl" or n.endswith("/data.pkl") for n in names)


def read_prompt(data: bytes, name: str) -> tuple[np.ndarray, str, float | None]:
    """(codes int64 [8, T], transcript, RMS or None) from upstream's .pt or wyoming-piper's ref.rvq;
    PromptFileError naming `name` for anything else."""
    try:
        archive = _Archive(data)
        try:
            loaded = _Unpickler(archive).load()
        except PromptFileError:
            raise
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
                struct.error, RecursionError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
            _refuse(f"its pickle is malformed ({type(exc).__name__})")
        return _prompt_fields(loaded)
    except PromptFileError as exc:
        error = PromptFileError(f"voice file {name} is refused: {exc}; save it with upstream's "
                                "VoiceClonePrompt.save or inference.py --save_voice")
        error.problem = str(exc)  # for a door that names the voice its own way
        raise error from None


# Our .npz: np.load would allocate whatever shape a member's header claims before reading it, so each
# member is read within its cap and its header held to the bytes that follow it.
NPZ_CAPS = {"codes.npy": 4096 + MAX_ELEMENTS * 8, "text.npy": 4096 + MAX_PICKLE_BYTES * 4, "rms.npy": 4096,
            "format_version.npy": 4096}


def read_npz(data: bytes, name: str) -> dict[str, np.ndarray]:
    """The arrays of our .npz voice file (codes, text, rms, format_version), never an object array;
    PromptFileError naming `name` for anything else."""
    try:
        archive, arrays = _Zip(data), {}
        for member, most in NPZ_CAPS.items():
            raw = archive.read(member, most)
            stream = io.BytesIO(raw)
            try:
                major, _ = np.lib.format.read_magic(stream)
                read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape, fortran, dtype = read_header(stream)
            except (ValueError, OSError, EOFError, TypeError, SyntaxError) as exc:
                _refuse(f"its member {member} is not a numpy array ({_first_line(exc)})")
            if dtype.hasobject:
                _refuse(f"its member {member} holds Python objects, which a voice never does")
            count = math.prod(shape)
            if count * dtype.itemsize != len(raw) - stream.tell():
                _refuse(f"its member {member} claims shape {list(shape)[:4]} but holds {len(raw) - stream.tell()} bytes")
            arrays[member[: -len(".npy")]] = np.frombuffer(raw, dtype, count, stream.tell()).reshape(
                shape, order="F" if fortran else "C")
        return arrays
    except PromptFileError as exc:
        error = PromptFileError(f"cannot read voice file {name} ({exc}); save one with --save_voice")
        error.problem = str(exc)
        raise error from None


def _prompt_fields(loaded) -> tuple[np.ndarray, str, float | None]:
    if type(loaded) is not dict:
        _refuse(f"it holds a {type(loaded).__name__}, not the dict of a voice prompt")
    missing = [key for key in ("ref_audio_tokens", "ref_text", "ref_rms") if key not in loaded]
    if missing:
        _refuse(f"it has no {', '.join(missing)}, so it is not a voice prompt")
    version = loaded.get("format_version", FORMAT_VERSION)  # wyoming-piper's ref.rvq has none
    if type(version) is not int or version != FORMAT_VERSION:
        _refuse(f"its format_version is {version!r}; this reads version {FORMAT_VERSION}")
    tokens = loaded["ref_audio_tokens"]
    if not isinstance(tokens, _Tensor):
        _refuse(f"its ref_audio_tokens is a {type(tokens).__name__}, not a tensor")
    codes = tokens[0]
    if codes.dtype.kind not in "iu":
        _refuse(f"its ref_audio_tokens are {codes.dtype.name}; a voice's codes are integers (int64)")
    if codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS or not 1 <= codes.shape[1] <= MAX_FRAMES:
        _refuse(f"its ref_audio_tokens have shape {list(codes.shape)}; a voice's are [{NUM_CODEBOOKS}, frames] "
                f"with 1 to {MAX_FRAMES} frames")
    if codes.min() < 0 or codes.max() >= CODEBOOK_SIZE:
        _refuse(f"its ref_audio_tokens hold {int(codes.min())}..{int(codes.max())}; codes lie in 0..{CODEBOOK_SIZE - 1}")
    text = loaded["ref_text"]
    if type(text) is not str or not text.strip():
        _refuse(f"its ref_text is {'empty' if type(text) is str else 'a ' + type(text).__name__}, not a transcript")
    rms = loaded["ref_rms"]
    if rms is not None and (type(rms) not in (float, int) or not math.isfinite(rms) or rms < 0):
        _refuse(f"its ref_rms is {rms!r:.40}; it is the reference's RMS, a finite number >= 0")
    return codes.astype(np.int64), text, None if rms is None else float(rms)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:120]


# --- writing ---------------------------------------------------------------------------------------

def prompt_bytes(codes: np.ndarray, text: str, rms: float | None) -> bytes:
    """The bytes of upstream's VoiceClonePrompt.save for these fields, without torch. rms None (a
    synthesized reference, which sets no loudness) is saved as None: upstream's load keeps it and its
    generate then normalizes the peak, as we do; upstream's own save cannot write it."""
    codes = np.ascontiguousarray(codes, dtype="<i8")
    if codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS or not 1 <= codes.shape[1] <= MAX_FRAMES:
        raise UserError(f"a voice's codes are [{NUM_CODEBOOKS}, 1..{MAX_FRAMES}], got {list(codes.shape)}")
    frames = codes.shape[1]
    tensor = (_global("torch._utils", "_rebuild_tensor_v2")
              + pickle.MARK
              + pickle.MARK + _str("storage") + _global("torch", "LongStorage") + _str("0") + _str("cpu")
              + _int(codes.size) + pickle.TUPLE + pickle.BINPERSID
              + _int(0) + _int(NUM_CODEBOOKS) + _int(frames) + pickle.TUPLE2 + _int(frames) + _int(1) + pickle.TUPLE2
              + pickle.NEWFALSE + _global("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE
              + pickle.TUPLE + pickle.REDUCE)
    rms_op = pickle.NONE if rms is None else pickle.BINFLOAT + struct.pack(">d", float(rms))
    pickled = (pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.MARK
               + _str("format_version") + _int(FORMAT_VERSION)
               + _str("ref_audio_tokens") + tensor
               + _str("ref_text") + _str(text)
               + _str("ref_rms") + rms_op
               + pickle.SETITEMS + pickle.STOP)
    members = [("data.pkl", pickled), (".format_version", b"1"), (".storage_alignment", str(ALIGNMENT).encode()),
               ("byteorder", b"little"), ("data/0", codes.tobytes()), ("version", b"3\n")]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(f"archive/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            header = 30 + len(info.filename) + 4  # the local header, then a padding field's own header
            info.extra = _padding(-(buffer.tell() + header) % ALIGNMENT)
            archive.writestr(info, data)
    return buffer.getvalue()


def _padding(size: int) -> bytes:
    """An extra field ("FB", as torch writes) of `size` zero bytes, so the member's data starts aligned."""
    return b"FB" + struct.pack("<H", size) + b"\0" * size


def _global(module: str, name: str) -> bytes:
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def _str(value: str) -> bytes:
    data = value.encode("utf-8", "surrogatepass")
    return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def _int(value: int) -> bytes:
    if 0 <= value < 256:
        return pickle.BININT1 + bytes([value])
    if 0 <= value < 65536:
        return pickle.BININT2 + struct.pack("<H", value)
    return pickle.BININT + struct.pack("<i", value)
