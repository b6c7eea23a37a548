"""Shared test doubles for comparing codes/ with upstream omnivoice function by function.

Upstream's generation helpers are methods of the OmniVoice model; `upstream_self`
builds a light object that carries just what a method reads, so the real
upstream code runs without weights. `ToyModel` stands in for the network: a
fixed seeded numpy function of (input_ids, audio_mask, attention_mask) whose
logits depend on the whole input, so both decoders see identical logits.
"""

from __future__ import annotations

import importlib.util
import warnings
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

warnings.filterwarnings("ignore", message="Couldn't find ffmpeg or avconv")

import torch  # noqa: E402
from omnivoice.models.omnivoice import OmniVoice  # noqa: E402

from codes.runtime.contract.specs import AUDIO_MASK_ID, AUDIO_VOCAB_SIZE, NUM_CODEBOOKS, SAMPLE_RATE  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def tiny_upstream(checkpoint_path):
    """Upstream OmniVoice on a checkpoint, on one torch thread while it is held: the tiny model runs fastest on
    one thread of a busy 2-core machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield OmniVoice.from_pretrained(str(checkpoint_path), attn_implementation="sdpa").eval()
    finally:
        torch.set_num_threads(previous)


def extraction_tool():
    """tools/extract_upstream_tables.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "extract_upstream_tables", REPO_ROOT / "tools" / "extract_upstream_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _UpstreamSelf:
    """Carries upstream OmniVoice's generation methods without being a torch module."""

    _prepare_inference_inputs = OmniVoice._prepare_inference_inputs
    _generate_iterative = OmniVoice._generate_iterative
    _predict_tokens_with_scoring = OmniVoice._predict_tokens_with_scoring
    _post_process_audio = OmniVoice._post_process_audio
    _estimate_target_tokens = OmniVoice._estimate_target_tokens
    _ensure_list = OmniVoice._ensure_list
    _preprocess_all = OmniVoice._preprocess_all
    create_voice_clone_prompt = OmniVoice.create_voice_clone_prompt

    def __init__(self, **attributes):
        self.config = SimpleNamespace(num_audio_codebook=NUM_CODEBOOKS, audio_mask_id=AUDIO_MASK_ID)
        self.device = torch.device("cpu")
        self.sampling_rate = SAMPLE_RATE
        self.forward_calls = []
        self.logits_fn = None
        self.__dict__.update(attributes)

    def __call__(self, input_ids, audio_mask, attention_mask):
        self.forward_calls.append((input_ids.clone(), audio_mask.clone(), attention_mask.clone()))
        logits = self.logits_fn(input_ids.numpy(), audio_mask.numpy(), attention_mask.numpy())
        return SimpleNamespace(logits=torch.from_numpy(logits))


def upstream_self(**attributes) -> _UpstreamSelf:
    return _UpstreamSelf(**attributes)


def upstream_task(items, ref_codes_of):
    """Upstream's GenerationTask for test items (text, target_len, ref_text, ref, lang, instruct, ...);
    `ref_codes_of(item)` gives the item's reference codes (numpy) or None."""
    from omnivoice.models.omnivoice import GenerationTask

    def ref_tokens(item):
        codes = ref_codes_of(item)
        return None if codes is None else torch.from_numpy(codes)

    return GenerationTask(
        batch_size=len(items),
        texts=[item[0] for item in items],
        target_lens=[item[1] for item in items],
        langs=[item[4] for item in items],
        instructs=[item[5] for item in items],
        ref_texts=[item[2] for item in items],
        ref_audio_tokens=[ref_tokens(item) for item in items],
        ref_rms=[None] * len(items),
    )


class ToyModel:
    """logits [2B, 8, S, 1025] from a seeded embedding + one masked-attention mix + heads.

    Position embeddings keep all-MASK cells apart, and continuous random
    weights keep exact ties out, so argmax and top-k agree between torch and
    numpy. Only audio positions get logits (text positions stay 0): decoding
    reads target cells only, and this keeps the test fast on 2 cores.
    """

    def __init__(self, seed: int = 0, dim: int = 16, text_buckets: int = 4099, max_len: int = 1024):
        rng = np.random.default_rng(seed)
        self.text_buckets = text_buckets
        self.text_table = rng.standard_normal((text_buckets, dim)).astype(np.float32)
        self.audio_table = (0.5 * rng.standard_normal((NUM_CODEBOOKS * AUDIO_VOCAB_SIZE, dim))).astype(np.float32)
        self.positions = rng.standard_normal((max_len, dim)).astype(np.float32)
        self.heads = (2.0 * rng.standard_normal((dim, NUM_CODEBOOKS * AUDIO_VOCAB_SIZE))).astype(np.float32)
        self.offsets = (np.arange(NUM_CODEBOOKS) * AUDIO_VOCAB_SIZE)[None, :, None]

    def __call__(self, input_ids: np.ndarray, audio_mask: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        rows, _, seq_len = input_ids.shape
        text = self.text_table[input_ids[:, 0, :] % self.text_buckets]
        audio = self.audio_table[input_ids * audio_mask[:, None, :] + self.offsets].sum(axis=1)
        hidden = np.where(audio_mask[..., None], audio, text) + self.positions[:seq_len]
        weights = attention_mask[:, 0].astype(np.float32)
        weights /= np.maximum(weights.sum(axis=-1, keepdims=True), 1.0)
        hidden = np.tanh(hidden + weights @ hidden)
        logits = np.zeros((rows, seq_len, NUM_CODEBOOKS, AUDIO_VOCAB_SIZE), dtype=np.float32)
        logits[audio_mask] = (hidden[audio_mask] @ self.heads).reshape(-1, NUM_CODEBOOKS, AUDIO_VOCAB_SIZE)
        return logits.transpose(0, 2, 1, 3)


def full_logits(logits_fn):
    """Adapt `logits_fn(input_ids, audio_mask, attention_mask) -> [2B, 8, S, V]` (upstream's layout, as
    ToyModel gives) to decoding's target-only contract: one (cond [8, T, V], uncond [8, T, V]) pair per item."""

    def target_logits(input_ids, batch, target_lens):
        logits = np.asarray(logits_fn(input_ids, batch.audio_mask, batch.attention_mask), dtype=np.float32)
        num_items = len(target_lens)
        return [
            (logits[item, :, cond_len - target_len : cond_len], logits[num_items + item, :, :target_len])
            for item, (cond_len, target_len) in enumerate(zip(batch.cond_lens, target_lens))
        ]

    return target_logits


class ReplayedRandLike:
    """Stands in for torch.rand_like: values from the same seeded generator our RandomNoise uses."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.shapes = []

    def __call__(self, like, *args, **kwargs):
        self.shapes.append(tuple(like.shape))
        return torch.from_numpy(self.rng.random(tuple(like.shape), dtype=np.float32))


class RecordingNoise:
    """A NoiseSource that records the shapes it was asked for."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.shapes = []

    def uniform(self, shape):
        self.shapes.append(tuple(shape))
        return self.rng.random(shape, dtype=np.float32)


def load_with_transformers(model_dir):
    """Load model_dir as upstream does (AutoTokenizer) and check it is Qwen's fast tokenizer."""
    from transformers import AutoTokenizer, Qwen2Tokenizer

    from codes.export.tokenizer_build import VOCAB_SIZE

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    assert isinstance(tokenizer, Qwen2Tokenizer) and tokenizer.is_fast, (
        f"{model_dir} loads as {type(tokenizer).__name__}, not a fast Qwen2Tokenizer")
    assert len(tokenizer) == VOCAB_SIZE, f"{model_dir} holds {len(tokenizer)} tokens, expected {VOCAB_SIZE}"
    return tokenizer


# Several test modules import these fixtures and pytest would set them up once per
# module; building and loading the tokenizer once per process is enough.
_TOKENIZERS: dict[str, object] = {}


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    if "dir" not in _TOKENIZERS:
        from codes.export.tokenizer_build import write_tokenizer_files

        _TOKENIZERS["dir"] = tmp_path_factory.mktemp("omnivoice_tokenizer")
        write_tokenizer_files(_TOKENIZERS["dir"])
    return _TOKENIZERS["dir"]


@pytest.fixture(scope="session")
def text_tokenizer(tokenizer_dir):
    from codes.runtime.text.tokenizer import TextTokenizer

    return TextTokenizer.from_dir(tokenizer_dir)


@pytest.fixture(scope="session")
def hf_tokenizer(tokenizer_dir):
    """The same files through transformers, as upstream's `text_tokenizer` attribute."""
    if "hf" not in _TOKENIZERS:
        _TOKENIZERS["hf"] = load_with_transformers(tokenizer_dir)
    return _TOKENIZERS["hf"]


@contextmanager
def recorded_codes(upstream):
    """The codes of every upstream `_generate_iterative` call (one per batch, or per chunk) in order."""
    calls = []
    original = upstream._generate_iterative

    def recording(task, config):
        codes = original(task, config)
        calls.append([item.numpy().copy() for item in codes])
        return codes

    upstream._generate_iterative = recording
    try:
        yield calls
    finally:
        del upstream._generate_iterative
