"""A corpus run: Ray Data reads and checks the rows, the driver plans, actors speak, the ledger remembers.

1. Ray Data reads the input (JSONL lines, Parquet or CSV) and checks every row in its read stage.
2. The driver numbers the rows, marks duplicate ids, skips rows the ledger says are done, claims
   the rest and groups them by estimated length (longest first, so the last batches are short).
3. map_batches runs worker.Synthesizer on an actor pool; each finished batch is in the ledger
   before the next is taken.
4. The results table (one record per input row) is written atomically at the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import sha256_file
from codes.common.ray_start import actor_resources, ray_cause, start_ray
from codes.corpus import rows as row_checks
from codes.corpus.ledger import AUDIO_DIR, RESULTS_PARQUET, Ledger, audio_path, check_output_dir, record
from codes.runtime.contract.manifest import build_key, find_builds, read_manifest, recogniser_folder
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.recognition.asr import MANIFEST_NAME as ASR_MANIFEST_NAME

INPUT_KINDS = {".jsonl": "lines", ".ndjson": "lines", ".parquet": "parquet", ".csv": "csv"}
FORMATS = ("wav", "flac")
MAX_BLOCKS = 20_000  # beyond this, a block holds several batches (fewer objects for Ray to track)
SHOWN_ERRORS = 5


@dataclass
class CorpusOptions:
    input: str
    output: Path
    model_dir: Path | None = None
    higgs_dir: Path | None = None
    asr_dir: Path | None = None  # the recogniser for rows without a transcript (None: the build's own)
    address: str | None = None  # None: an embedded local Ray on this machine's cores
    actors: int | None = None  # None: as many as the CPUs (or GPUs) allow
    threads_per_actor: int = 1
    batch_size: int = 4
    provider: str | None = None
    gpus_per_actor: float | None = None
    audio_format: str = "wav"
    seed: int = 0
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    verbose: bool = False
    retry_failed: bool = False  # speak again the rows that took their actor down last time
    audio_dir: str = AUDIO_DIR  # "": the audio beside the results, as upstream's --res_dir
    lang_id: str | None = None  # every row's language (upstream's --lang_id)
    normalize_text: bool = False  # numbers, dates, ... into words first (upstream's normalize_text=True)
    batch_duration: float | None = None  # batches by estimated seconds (reference + speech), not by rows


@dataclass
class Summary:
    rows: int = 0
    spoken: int = 0
    failed: int = 0
    skipped: int = 0
    crashed_before: int = 0  # rows that took an actor down in an earlier run, not spoken again
    warned: int = 0
    audio_seconds: float = 0.0  # spoken by this run
    corpus_audio_seconds: float = 0.0  # every ok row, this run's and earlier ones
    synthesis_wall_seconds: float = 0.0  # actors started to last batch back
    actors: int = 0  # started by this run (0: nothing to speak)
    threads_per_actor: int = 0
    results: Path | None = None
    errors: list[str] = field(default_factory=list)  # the first few, "label: message"


class RunFailed(Exception):
    """Ray could not finish the run (an actor that cannot start, a lost node): exit 1, the ledger keeps the rest."""


class Interrupted(Exception):
    def __init__(self, spoken: int):
        super().__init__(spoken)
        self.spoken = spoken


def run_corpus(options: CorpusOptions) -> Summary:
    _check_options(options)
    kind, base_dir = input_kind(options.input)
    model_dir, higgs_dir = find_builds(options.model_dir, options.higgs_dir)
    build_keys = _build_keys(model_dir, higgs_dir, options.asr_dir)
    out_dir = Path(options.output)
    check_output_dir(out_dir, options.audio_dir)

    try:
        import ray
    except ImportError:
        raise UserError("corpus.py needs Ray Data: pip install -r requirements.txt (it pins ray[data])") from None

    _start_ray(options)
    try:
        checked = _read_rows(options.input, kind, base_dir, options.seed, options.lang_id)
        actors, threads, gpus = _actor_resources(options)
        ledger = Ledger(out_dir, options.audio_dir)
        try:
            return _run(options, checked, ledger, model_dir, higgs_dir, build_keys, actors, threads, gpus)
        finally:
            ledger.close()
    finally:
        ray.shutdown()


def _check_options(options: CorpusOptions) -> None:
    if options.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {options.batch_size}")
    if options.batch_duration is not None and not options.batch_duration > 0:
        raise UserError(f"--batch_duration must be > 0 seconds, got {options.batch_duration}")
    if options.actors is not None and options.actors < 1:
        raise UserError(f"--actors must be >= 1, got {options.actors}")
    if options.threads_per_actor < 1:
        raise UserError(f"--threads-per-actor must be >= 1, got {options.threads_per_actor}")
    if options.gpus_per_actor is not None and not options.gpus_per_actor >= 0:
        raise UserError(f"--gpus-per-actor must be >= 0, got {options.gpus_per_actor}")
    if options.audio_format not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {options.audio_format!r}")
    if not 0 <= options.seed < row_checks.MAX_SEED:
        raise UserError(f"--seed must be a whole number from 0 to 2**63-1, got {options.seed}")


def input_kind(path: str) -> tuple[str, str | None]:
    """(how to read it, the folder relative voice paths start from) for a file or a folder of files."""
    if "://" in path:  # a URI Ray reads itself (s3://, gs://, ...): the name says the format
        kind = INPUT_KINDS.get(Path(path.split("?")[0]).suffix.lower())
        if kind is None:
            raise UserError(f"cannot tell the format of --input {path}: name a .jsonl, .parquet or .csv file")
        return kind, None
    local = Path(path)
    if not local.exists():
        raise UserError(f"--input {path} does not exist; give a .jsonl, .parquet or .csv file (or a folder of them)")
    if local.is_dir():
        files = [p for p in local.iterdir() if p.is_file() and not p.name.startswith(".")]
        kinds = {INPUT_KINDS[p.suffix.lower()] for p in files if p.suffix.lower() in INPUT_KINDS}
        if len(kinds) != 1:
            found = "none" if not kinds else " and ".join(sorted(kinds))
            raise UserError(f"--input folder {path} must hold .jsonl, .parquet or .csv files of one kind "
                            f"(found {found})")
        return kinds.pop(), str(local.resolve())
    kind = INPUT_KINDS.get(local.suffix.lower())
    if kind is None:
        raise UserError(f"--input {path} is not a .jsonl, .parquet or .csv file; rename it or convert it")
    return kind, str(local.resolve().parent)


def _build_keys(model_dir: Path, higgs_dir: Path | None, asr_dir: Path | None) -> tuple[str, str | None]:
    """The build's identity for fingerprints, from its manifests, which hold every file's sha256; and the
    recogniser's (None: there is none), which only rows without a transcript depend on.

    Reading them checks every hash here, once: a broken build is one error line before any actor starts.
    """
    manifest = read_manifest(model_dir)
    if higgs_dir:
        read_manifest(higgs_dir)
    recogniser = (recogniser_folder(asr_dir) if asr_dir is not None
                  else manifest.recogniser() if manifest.asr else None)
    recogniser_key = (hashlib.sha256((recogniser / ASR_MANIFEST_NAME).read_bytes()).hexdigest()[:32]
                      if recogniser else None)
    return build_key(model_dir, higgs_dir), recogniser_key


def _start_ray(options: CorpusOptions) -> None:
    start_ray(options.address, options.verbose)
    import ray.data

    context = ray.data.DataContext.get_current()
    # The bars are drawn here, in the driver: plain tqdm, not Ray's relay for bars drawn in workers.
    context.use_ray_tqdm = False
    if not options.verbose:
        context.enable_operator_progress_bars = False  # one bar per stage, not one per operator
        for handler in logging.getLogger("ray.data").handlers:
            if not isinstance(handler, logging.FileHandler) and type(handler).__name__ != "SessionFileHandler":
                # The console: a failure comes back as our one error line; the progress bar is no log line.
                handler.setLevel(logging.CRITICAL)


def _read_rows(path: str, kind: str, base_dir: str | None, seed: int, lang_id: str | None) -> list[dict]:
    """Every input line or row in input order, checked by Ray Data's read stage."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import ray.data

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # line numbers
    try:
        if kind == "lines":
            dataset = ray.data.read_text(path, drop_empty_lines=False, include_paths=True,
                                         file_extensions=["jsonl", "ndjson"])
        elif kind == "parquet":
            dataset = ray.data.read_parquet(path)
        else:
            # Every known column as text: "007" stays an id, and a bad number is one row's error.
            convert = pa_csv.ConvertOptions(column_types={key: pa.string() for key in row_checks.ROW_KEYS},
                                            strings_can_be_null=True)
            dataset = ray.data.read_csv(path, convert_options=convert, file_extensions=["csv"])
        if kind != "lines":
            columns = dataset.schema().names
            missing = [key for key in ("id", "text") if key not in columns]
            if missing:
                raise UserError(f"--input {path} has no {' or '.join(missing)} column; "
                                f"every row needs an id and a text (it has: {', '.join(columns)})")
        checked = dataset.map_batches(row_checks.check_batch, batch_format="pyarrow",
                                      fn_kwargs=dict(kind="lines" if kind == "lines" else "table",
                                                     base_dir=base_dir, base_seed=seed, lang_id=lang_id))
        found = [item for batch in checked.iter_batches(batch_size=None, batch_format="pyarrow")
                 for item in batch.to_pylist()]
    except UserError:
        raise
    except Exception as exc:  # Ray wraps the reader's error (a malformed CSV, bad UTF-8, ...)
        raise UserError(f"cannot read --input {path}: {ray_cause(exc)}") from None
    finally:
        context.execution_options.preserve_order = False
    _label_rows(found, kind)
    found = [item for item in found if not item["blank"]]
    if not found:
        raise UserError(f"--input {path} holds no rows; write one row per utterance (id, text, ...)")
    return found


def _label_rows(found: list[dict], kind: str) -> None:
    """Where each row is in the input, for messages: "line 7" (JSONL, per file) or "row 7"."""
    sources = {item["source"] for item in found}
    counts: Counter = Counter()
    for item in found:
        counts[item["source"]] += 1
        if kind == "lines":
            prefix = f"{Path(item['source']).name} " if len(sources) > 1 else ""
            item["row"] = f"{prefix}line {counts[item['source']]}"
        else:
            item["row"] = f"row {counts[item['source']]}"


def _actor_resources(options: CorpusOptions) -> tuple[int, int, float]:
    return actor_resources(options.actors, options.threads_per_actor, options.gpus_per_actor, options.provider)


def _run(options, checked, ledger: Ledger, model_dir, higgs_dir, build_keys, actors, threads, gpus) -> Summary:
    summary = Summary(rows=len(checked), results=ledger.out_dir / RESULTS_PARQUET)
    results, todo, summary.crashed_before = _plan(checked, ledger, options, build_keys)
    summary.skipped = sum(result is not None and result["status"] == "ok" for result in results)
    if todo:
        ledger.append([record(id=t["id"], row=t["row"], status="pending", audio_path=t["audio_path"],
                              fingerprint=t["fingerprint"]) for t in todo])
        ledger.remove_temporaries()
        batches = _batches(sorted(todo, key=lambda t: -t["frames"]), options)  # longest first: the pool ends on short ones
        summary.actors, summary.threads_per_actor = min(actors, len(batches)), threads  # no actor without a batch
        start = time.perf_counter()
        for done in _speak(batches, options, ledger, model_dir, higgs_dir, summary.actors, threads, gpus):
            if done["status"] == "ok":
                summary.spoken += 1
                summary.audio_seconds += done["audio_seconds"]
        summary.synthesis_wall_seconds = time.perf_counter() - start
        ledger.remove_temporaries()  # an actor that died mid-write left its hidden file; every actor is done now
        for item in todo:
            entry = ledger.entries[item["audio_path"]]
            results[item["index"]] = dict(entry) if entry["status"] != "pending" else record(
                id=item["id"], row=item["row"], status="error", audio_path=item["audio_path"],
                error="no result came back from the actors; run again to redo it")

    for item, result in zip(checked, results):  # the read stage's warnings (unknown keys) join the actor's
        if item["warning"] and item["warning"] not in (result["warning"] or ""):
            result["warning"] = "; ".join(filter(None, [item["warning"], result["warning"]]))
    ledger.write_results(results)
    summary.failed = sum(r["status"] != "ok" for r in results)
    summary.warned = sum(bool(r["warning"]) for r in results)
    summary.corpus_audio_seconds = sum(r["audio_seconds"] or 0.0 for r in results if r["status"] == "ok")
    summary.errors = [f"{r['id'] if r['id'] is not None else r['row']}: {r['error']}"
                      for r in results if r["status"] != "ok"][:SHOWN_ERRORS]
    return summary


def _file_key(row_id: str) -> str:
    """What an id's audio file is called where file names ignore case and Unicode normalisation
    (macOS, Windows): ids that share it would write one file there."""
    return unicodedata.normalize("NFC", row_id).casefold()


def _plan(checked: list[dict], ledger: Ledger, options, build_keys: tuple[str, str | None]) -> tuple[list, list[dict], int]:
    """(results known before any synthesis: errors and skipped rows, None for the rest; the rows to speak;
    how many rows are skipped because they took their actor down last time)."""
    model_key, recogniser_key = build_keys
    fmt, settings = options.audio_format, options.settings.to_dict()
    if options.normalize_text:  # only then: a run without it keeps the fingerprints it had before
        settings["normalize_text"] = True
    where: dict = {}
    for item in checked:
        if item["id"] is not None:
            where.setdefault(_file_key(item["id"]), []).append((item["row"], item["id"]))
    contents: dict[str, str] = {}
    results: list[dict | None] = [None] * len(checked)
    todo = []
    crashed = 0
    for index, item in enumerate(checked):
        row_id, error = item["id"], item["error"]
        if row_id is not None and len(where[_file_key(row_id)]) > 1:
            rows, ids = zip(*where[_file_key(row_id)])
            shown = ", ".join(rows[:SHOWN_ERRORS]) + (", ..." if len(rows) > SHOWN_ERRORS else "")
            names = sorted(set(ids))
            named = (f"id {json.dumps(row_id, ensure_ascii=False)} is" if len(names) == 1 else
                     f"ids {' and '.join(json.dumps(n, ensure_ascii=False) for n in names)} (equal but for case, "
                     "so one file where file names ignore case) are")
            duplicate = f"{named} used by {len(rows)} rows ({shown}); ids must be unique, they name the audio files"
            error = duplicate if error is None else f"{duplicate}; also: {error}"
        if error is None:
            path = audio_path(options.audio_dir, f"{row_id}.{fmt}")
            request = json.loads(item["request"])
            voices = _voice_contents(request, contents)
            transcribed = request["ref_audio"] and not request["ref_text"]
            # A row without voice files keeps the fingerprint it had before the files' contents were in it, and
            # a row with its transcript the one it had before recognisers.
            stamp = row_checks.fingerprint(item["request"], *([voices] if any(voices) else []), settings, fmt,
                                           model_key, *([recogniser_key] if transcribed else []))
            final = ledger.out_dir / path
            if ledger.is_done(path, stamp):
                results[index] = {**ledger.entries[path], "row": item["row"]}
                continue
            if ledger.crashed(path, stamp) and not options.retry_failed:
                results[index] = {**ledger.entries[path], "row": item["row"]}
                crashed += 1
                continue
            if not (final.exists() or final.is_symlink()) or ledger.discard(path):
                todo.append(dict(index=index, id=row_id, row=item["row"], audio_path=path,
                                 request=item["request"], fingerprint=stamp, frames=item["frames"]))
                continue
            error = f"{final} exists and corpus.py did not write it; move it away or choose another --output"
        results[index] = record(id=row_id, row=item["row"], status="error", error=error, warning=item["warning"])
    return results, todo, crashed


def _voice_contents(request: dict, contents: dict[str, str]) -> list:
    """The sha256 of the row's voice file and reference clip: a file replaced under the same name is a new
    request. A URI is named, not read (Ray's workers fetch it)."""
    hashes = []
    for key in ("voice", "ref_audio"):
        path = request.get(key)
        if path and "://" not in path:
            if path not in contents:
                try:
                    contents[path] = sha256_file(path)
                except OSError:  # gone since the read stage: the actor reports it
                    contents[path] = "unreadable"
            hashes.append(contents[path])
        else:
            hashes.append(None)
    return hashes


def _speak(batches, options, ledger: Ledger, model_dir, higgs_dir, actors, threads, gpus):
    """Run the actor pool over the claimed rows; yields each result as its batch lands in the ledger."""
    import pyarrow as pa
    import ray
    import ray.data

    from codes.corpus.worker import WORK_SCHEMA, Synthesizer

    # A block is a batch (map_batches takes whole blocks); past MAX_BLOCKS, neighbours share one.
    per_block = max(1, math.ceil(len(batches) / MAX_BLOCKS))
    blocks = [pa.Table.from_pylist([{k: t[k] for k in WORK_SCHEMA.names}
                                    for batch in batches[i:i + per_block] for t in batch], schema=WORK_SCHEMA)
              for i in range(0, len(batches), per_block)]
    provider = options.provider or ("cuda" if gpus else None)
    speaking = ray.data.from_arrow(blocks).map_batches(
        Synthesizer, batch_size=None, batch_format="pyarrow",
        fn_constructor_kwargs=dict(model_dir=str(Path(model_dir).resolve()),
                                   higgs_dir=str(Path(higgs_dir).resolve()) if higgs_dir else None,
                                   asr_dir=str(Path(options.asr_dir).resolve()) if options.asr_dir else None,
                                   provider=provider, threads=threads, settings=options.settings.to_dict(),
                                   out_dir=str(ledger.out_dir.resolve()), normalize_text=options.normalize_text),
        # One batch in flight per actor: batches take seconds, and a deep queue leaves one actor busy at the end.
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        num_cpus=threads, num_gpus=gpus or None,
    )
    spoken = 0
    try:
        for batch in speaking.iter_batches(batch_size=None, batch_format="pyarrow"):
            done = batch.to_pylist()
            for item in done:
                if item["status"] == "ok" and not (ledger.out_dir / item["audio_path"]).is_file():
                    # Written on another node's disk: OUT_DIR must be storage every node shares.
                    item.update(status="error", error=f"the actor {item['actor']} wrote {item['audio_path']} where "
                                                      "this machine cannot see it; use an --output every node shares")
            ledger.append(done)
            spoken += sum(item["status"] == "ok" for item in done)
            yield from done
    except KeyboardInterrupt:
        raise Interrupted(spoken) from None
    except ray.exceptions.RayError as exc:
        raise RunFailed(f"the synthesis actors failed: {ray_cause(exc)}; {spoken} rows finished are kept, "
                        "run the same command again to resume") from None


def _batches(todo: list[dict], options: CorpusOptions) -> list[list[dict]]:
    """The rows (longest first) in the batches actors take: --batch-size rows each, or with --batch_duration
    as upstream's omnivoice-infer-batch groups them, at most that many estimated seconds of reference and
    speech each (a longer row alone)."""
    if options.batch_duration is None:
        return [todo[i:i + options.batch_size] for i in range(0, len(todo), options.batch_size)]
    batches, current, seconds = [], [], 0.0
    for item in todo:
        length = item["frames"] / FRAME_RATE + _clip_seconds(json.loads(item["request"])["ref_audio"])
        if length > options.batch_duration:
            batches.append([item])
            continue
        if current and seconds + length > options.batch_duration:
            batches.append(current)
            current, seconds = [], 0.0
        current.append(item)
        seconds += length
    return batches + ([current] if current else [])


def _clip_seconds(path: str | None) -> float:
    """A reference clip's length from its header (0 where it cannot be read here: the actor reports that)."""
    if not path or "://" in path:
        return 0.0
    import soundfile

    try:
        info = soundfile.info(path)
    except Exception:  # soundfile raises several types for unreadable files
        return 0.0
    return info.frames / info.samplerate
