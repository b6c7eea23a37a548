"""Step-level batching: items join and leave between decoding steps, and none depends on another."""

from __future__ import annotations

import time
from concurrent.futures import CancelledError

import numpy as np
import pytest

from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.model.decoding import RandomNoise
from codes.runtime.model.engine import QueueFull, StepCost, StepEngine
from codes.runtime.synthesis import OmniVoiceOnnx
from helpers.faults import FailingNoise
from helpers.synthesis_inputs import FP32_BUILD

TEXTS = [("Hello there, how are you today?", "en", None),
         ("A second sentence, with a designed voice.", None, "female, low pitch"),
         ("Short.", "en", None)]
SETTINGS = GenerationSettings(num_steps=8)  # position noise on: each item's own generator matters


@pytest.fixture(scope="module")
def tts(builds):
    return OmniVoiceOnnx(builds.get(*FP32_BUILD), threads=1)


def solo_codes(tts, text, lang, instruct, seed):
    request = tts.settle(text, lang, instruct)[0]
    return tts.generate_codes([request], SETTINGS, RandomNoise(seed))[0][0]


def submit(engine, tts, text, lang, instruct, seed):
    return engine.submit(tts.settle(text, lang, instruct)[0], SETTINGS, RandomNoise(seed))


def wait_for_steps(item, steps: int, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while item.step_index < steps and time.monotonic() < deadline:
        time.sleep(0.002)


def test_items_that_share_steps_give_their_solo_codes(tts):
    engine = StepEngine(tts, max_batch=8)
    engine.start()
    try:
        first = submit(engine, tts, *TEXTS[0], seed=1)
        wait_for_steps(first, 2)  # the others join a running batch, mid-flight
        others = [submit(engine, tts, *TEXTS[i], seed=i + 1) for i in (1, 2)]
        items = [first, *others]
        results = [item.future.result(timeout=120) for item in items]
    finally:
        engine.stop()
    for i, (codes, item) in enumerate(zip(results, items)):
        np.testing.assert_array_equal(codes, solo_codes(tts, *TEXTS[i], seed=i + 1))
        assert item.started_at >= item.queued_at and item.finished_at > item.started_at
    assert first.max_shared >= 2 and max(item.max_shared for item in items) == 3
    assert first.started_at < others[0].started_at  # they joined while it ran


def test_max_batch_one_runs_items_one_after_another(tts):
    engine = StepEngine(tts, max_batch=1)
    engine.start()
    try:
        items = [submit(engine, tts, *TEXTS[i], seed=7) for i in (0, 2)]
        results = [item.future.result(timeout=120) for item in items]
    finally:
        engine.stop()
    assert [item.max_shared for item in items] == [1, 1]
    assert items[1].started_at >= items[0].finished_at
    np.testing.assert_array_equal(results[1], solo_codes(tts, *TEXTS[2], seed=7))


def test_a_cancelled_item_leaves_and_the_rest_finish(tts):
    engine = StepEngine(tts, max_batch=8)
    engine.start()
    try:
        leaving = submit(engine, tts, *TEXTS[0], seed=3)
        staying = submit(engine, tts, *TEXTS[1], seed=4)
        wait_for_steps(leaving, 1)
        engine.cancel(leaving)
        with pytest.raises(CancelledError):
            leaving.future.result(timeout=120)
        np.testing.assert_array_equal(staying.future.result(timeout=120), solo_codes(tts, *TEXTS[1], seed=4))
        assert leaving.step_index < SETTINGS.num_steps
    finally:
        engine.stop()


def test_a_full_queue_refuses_more_work(tts):
    engine = StepEngine(tts, max_batch=1, max_queue=2)  # not started: nothing leaves the queue
    submit(engine, tts, *TEXTS[2], seed=0)
    submit(engine, tts, *TEXTS[2], seed=1)
    with pytest.raises(QueueFull, match="busy"):
        submit(engine, tts, *TEXTS[2], seed=2)


def urgent_beside_a_running_later_chunk(tts, cost: StepCost):
    """A later chunk two steps in, then an urgent one: (urgent item, its codes, the later item, its step
    when the urgent one finished, its codes)."""
    engine = StepEngine(tts, max_batch=8, cost=cost)
    engine.start()
    try:
        later = submit(engine, tts, *TEXTS[0], seed=1)
        wait_for_steps(later, 2)
        first = engine.submit(tts.settle(*TEXTS[2])[0], SETTINGS, RandomNoise(3), urgent=True)
        first_codes = first.future.result(timeout=120)
        paused_at = later.step_index
        return first, first_codes, later, paused_at, later.future.result(timeout=120)
    finally:
        engine.stop()


def test_an_urgent_item_runs_ahead_of_a_running_later_chunk_which_waits_unchanged(tts):
    """Where batching is not free (the cost model says every token costs more than a step's fixed
    cost), a new first chunk runs alone and the later chunk pauses, then finishes with its solo codes."""
    first, first_codes, later, paused_at, later_codes = urgent_beside_a_running_later_chunk(
        tts, StepCost(fixed=0.0, per_token=1.0, learn=False))
    assert first.max_shared == 1 and paused_at < SETTINGS.num_steps  # it ran alone, ahead of the unfinished one
    assert first.finished_at < later.finished_at
    np.testing.assert_array_equal(first_codes, solo_codes(tts, *TEXTS[2], seed=3))
    np.testing.assert_array_equal(later_codes, solo_codes(tts, *TEXTS[0], seed=1))


def test_where_batching_is_nearly_free_an_urgent_item_joins_the_running_batch(tts):
    first, *_ = urgent_beside_a_running_later_chunk(tts, StepCost(fixed=1.0, per_token=0.0, learn=False))
    assert first.max_shared == 2


def test_steps_choose_urgent_items_first_then_by_due_time(tts):
    """The order of need, read off the engine's choice for one step (not started: nothing runs). The
    cost models make steps short, so the items due later have time to spare: none is pressing."""
    engine = StepEngine(tts, max_batch=2, cost=StepCost(fixed=1e-3, per_token=0.0, learn=False))
    request = tts.settle(*TEXTS[2])[0]
    now = time.perf_counter()
    due_late = engine.submit(request, SETTINGS, RandomNoise(0), due=now + 9)
    due_soon = engine.submit(request, SETTINGS, RandomNoise(0), due=now + 1)
    urgent = engine.submit(request, SETTINGS, RandomNoise(0), urgent=True)
    assert engine._choose() == [urgent, due_soon]
    strict = StepEngine(tts, max_batch=8, cost=StepCost(fixed=0.0, per_token=1e-6, learn=False))
    items = [strict.submit(request, SETTINGS, RandomNoise(0), due=now + i) for i in (2, 1)]
    assert strict._choose() == [items[1], items[0]]  # no urgent item: the batch fills, soonest first
    strict_urgent = strict.submit(request, SETTINGS, RandomNoise(0), urgent=True)
    assert strict._choose() == [strict_urgent]  # beside an urgent one, only what is nearly free joins
    assert due_late not in engine._choose()


def test_a_later_chunk_that_must_start_now_is_as_pressing_as_a_first_chunk(tts):
    """A flood of new requests cannot stall a running stream: a later chunk that must start now to be
    done by its due time goes before first chunks that came after that time, and one with time to
    spare still waits behind them."""
    engine = StepEngine(tts, max_batch=8, cost=StepCost(fixed=0.0, per_token=1e-4, learn=False))
    request = tts.settle(*TEXTS[2])[0]
    now = time.perf_counter()
    not_due = engine.submit(request, SETTINGS, RandomNoise(0), due=now + 60)
    first_chunks = [engine.submit(request, SETTINGS, RandomNoise(0), urgent=True) for _ in range(3)]
    overdue = engine.submit(request, SETTINGS, RandomNoise(0), due=now + 1e-3)
    assert overdue.start_by < now < not_due.start_by  # its steps take longer than the time left
    assert engine._choose() == [overdue]  # beside a pressing item only what is nearly free joins: nothing here
    engine._items.remove(overdue)
    assert engine._choose() == [first_chunks[0]] and not_due in engine._items


def test_the_cost_model_fits_fixed_and_per_token_seconds_and_warm_up_feeds_it(tts):
    cost = StepCost()
    cost.observe(100, 0.25)
    assert cost.per_token is None and cost.nearly_free(10**6)  # one size: unknown, batch freely
    for tokens in (200, 400):
        cost.observe(tokens, 0.05 + 0.002 * tokens)
    assert cost.fixed == pytest.approx(0.05) and cost.per_token == pytest.approx(0.002)
    assert cost.nearly_free(24) and not cost.nearly_free(26)  # 0.002 s a token against 0.05 s a step
    engine = StepEngine(tts)
    short, longer = (tts.settle(t, "en")[0] for t in ("Hi.", "A longer sentence to warm the sessions with."))
    engine.warm_up([[short], [longer, longer]])
    assert engine.cost.per_token is not None and engine.steps_run == 2 and not engine._items


def test_an_item_that_fails_a_step_fails_alone_and_its_neighbour_finishes_unchanged(tts):
    engine = StepEngine(tts, max_batch=8, cost=StepCost(fixed=1.0, per_token=0.0, learn=False))  # they share steps
    engine.start()
    try:
        healthy = submit(engine, tts, *TEXTS[0], seed=1)
        broken = engine.submit(tts.settle(*TEXTS[2])[0], SETTINGS, FailingNoise(ValueError("bad item"), after=2))
        with pytest.raises(ValueError, match="bad item"):
            broken.future.result(timeout=120)
        codes = healthy.future.result(timeout=120)
    finally:
        engine.stop()
    assert broken.max_shared == 2  # it failed inside a shared step
    np.testing.assert_array_equal(codes, solo_codes(tts, *TEXTS[0], seed=1))
    assert not engine.dead


def test_a_dead_engine_thread_fails_every_waiting_item_and_refuses_more(tts):
    from codes.runtime.model.engine import EngineDown

    engine = StepEngine(tts, max_batch=8)
    engine.start()
    waiting = submit(engine, tts, *TEXTS[0], seed=1)
    killer = engine.submit(tts.settle(*TEXTS[2])[0], SETTINGS, FailingNoise(SystemExit("engine bug")))
    with pytest.raises((EngineDown, SystemExit)):
        killer.future.result(timeout=120)
    with pytest.raises(EngineDown, match="stopped"):
        waiting.future.result(timeout=120)
    assert engine.dead and isinstance(engine.failure, SystemExit)
    with pytest.raises(EngineDown):
        submit(engine, tts, *TEXTS[2], seed=0)


def test_a_stopped_engine_refuses_new_work(tts):
    """Stopped (a server ending), nothing would decode what comes after: it is refused, never left waiting."""
    from codes.runtime.model.engine import EngineDown

    engine = StepEngine(tts, max_batch=8)
    engine.start()
    engine.stop()
    with pytest.raises(EngineDown, match="stopped"):
        submit(engine, tts, *TEXTS[0], seed=1)
