"""The analysis on several local processes: how many (``jobs="auto"``), the parts a dump is
cut into so that they share the work evenly, and the loop that runs the parts in worker
processes and in this one."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import math
import multiprocessing
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from otbound.analysis._config import AnalysisConfig
from otbound.analysis._shard import ShardOutcome, forget_part_shard, merge_parts
from otbound.dumps import Dump

#: ``jobs="auto"``: one process per usable core, as many as the memory and the work allow.
AUTO = "auto"
#: A dump with at least this many shards a process runs them whole (they share the work
#: evenly as they are); one with fewer is cut into parts of shards (:func:`plan_parts`).
PARTS_PER_JOB = 6
#: The fewest steps a part of a shard holds (a part re-reads its shard: reading is cheap
#: against analysing, but not free).
MIN_PART_STEPS = 16
#: Below this many vocabulary entries in all (steps × V) a run stays in one process: starting
#: a worker (an interpreter, the imports, the compiled kernels) costs about a second.
MIN_PARALLEL_ENTRIES = 2**20
#: Memory one process needs: a fixed part (the interpreter and the libraries), bytes per
#: entry of a chunk of ``chunk_steps × V`` (``p`` and ``q`` in float64 and the verifiers' work
#: arrays; about 1 GB at V = 32,000 and 256 steps was measured), and bytes per entry of the
#: shard it reads (16-bit logits of both models become float32 for the whole shard).
BASE_BYTES = 400 * 2**20
BYTES_PER_ENTRY = 96
BYTES_PER_SHARD_ENTRY = 8

Jobs = int | Literal["auto"]
T = TypeVar("T")
Analyse = Callable[..., ShardOutcome]


@dataclass(frozen=True)
class Part:
    """Steps ``start .. stop − 1`` (positions in the shard) of the shard ``shard`` (its
    position in ``Dump.shards``), one of ``of`` parts of it."""

    shard: int
    start: int
    stop: int
    of: int


#: Where a Linux container's limits are read (cgroup v2, then v1).
CGROUP = Path("/sys/fs/cgroup")


def _read_numbers(path: Path) -> list[int] | None:
    """The integers in a small file (``max`` as -1), or None if it cannot be read."""
    try:
        words = path.read_text(encoding="ascii").split()
        return [-1 if w == "max" else int(w) for w in words]
    except (OSError, ValueError):
        return None


def _cgroup_cores() -> int | None:
    """The cores a container's CPU quota allows (cgroup v2 ``cpu.max``, v1 ``cfs_quota_us``),
    or None without a quota."""
    quota = _read_numbers(CGROUP / "cpu.max")
    if quota is None:
        v1 = (_read_numbers(CGROUP / "cpu" / f"cpu.cfs_{k}_us") for k in ("quota", "period"))
        quota = [n for values in v1 if values for n in values[:1]]
    if len(quota) == 2 and quota[0] > 0 and quota[1] > 0:
        return max(1, math.ceil(quota[0] / quota[1]))
    return None


def _cgroup_memory() -> int | None:
    """Bytes a container's memory limit leaves (cgroup v2 ``memory.max − memory.current``,
    v1 ``limit_in_bytes − usage_in_bytes``), or None without a limit."""
    for limit_file, used_file in (
        (CGROUP / "memory.max", CGROUP / "memory.current"),
        (CGROUP / "memory" / "memory.limit_in_bytes", CGROUP / "memory" / "memory.usage_in_bytes"),
    ):
        limit, used = _read_numbers(limit_file), _read_numbers(used_file)
        if limit and used and 0 < limit[0] < 2**62:
            return max(0, limit[0] - used[0])
    return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (or the machine's count), and at
    most a container's CPU quota."""
    count = os.cpu_count() or 1
    with contextlib.suppress(AttributeError, OSError):
        count = len(os.sched_getaffinity(0))
    quota = _cgroup_cores()
    return max(1, min(count, quota) if quota else count)


def available_memory() -> int | None:
    """Bytes of memory available to new processes (``MemAvailable``, and at most what a
    container's limit leaves), or None if unknown."""
    found = None
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    if found is None:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit = _cgroup_memory()
    if limit is not None:
        found = limit if found is None else min(found, limit)
    return found


def resolve_jobs(
    jobs: Jobs, steps: int, vocab: int | None, config: AnalysisConfig, shard_steps: int = 0
) -> int:
    """The number of processes a run uses.

    An integer is taken as it is. ``"auto"`` gives one process per usable core
    (:func:`usable_cores`), at most as many as the memory available holds
    (``BASE_BYTES + (BYTES_PER_ENTRY × chunk_steps + BYTES_PER_SHARD_ENTRY × shard_steps) × V``
    each, with a fifth of it kept free) and as the work needs (at most one a part of
    :data:`MIN_PART_STEPS` steps; one process when ``steps × V`` is below
    :data:`MIN_PARALLEL_ENTRIES`, or when the bounds run on a torch device, which the
    processes would share).

    Parameters
    ----------
    jobs : int or "auto"
    steps : int
        Steps the run analyses.
    vocab : int or None
        The dump's vocabulary size (None if unknown: taken as small).
    config : AnalysisConfig
    shard_steps : int, default 0
        Steps of the largest shard the run reads.

    Raises
    ------
    ValueError
        ``jobs`` is neither an integer ``>= 1`` nor ``"auto"``.
    """
    if jobs == AUTO:
        width = vocab or 1
        if config.device is not None or steps * width < MIN_PARALLEL_ENTRIES:
            return 1
        count = usable_cores()
        memory = available_memory()
        if memory is not None:
            chunk = BYTES_PER_ENTRY * min(config.chunk_steps, steps)
            each = BASE_BYTES + (chunk + BYTES_PER_SHARD_ENTRY * shard_steps) * width
            count = min(count, int(0.8 * memory) // each)
        return max(1, min(count, math.ceil(steps / MIN_PART_STEPS)))
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1 or 'auto', got {jobs!r}")
    return jobs


def plan_parts(sizes: dict[int, int], jobs: int) -> list[Part]:
    """The parts the shards ``sizes`` (position -> steps to analyse) are cut into for ``jobs``
    processes, in shard order.

    Whole shards when there are at least :data:`PARTS_PER_JOB` of them a process. Else the
    parts shrink as the work is handed out (guided scheduling): each holds
    ``⌈R / (2 jobs)⌉`` of the ``R`` steps not yet handed out, at least
    :data:`MIN_PART_STEPS` (and a shard's rest below half that joins its last part), cut at
    the shards' ends. The processes take the parts in order, so the large first parts keep
    the overhead per part small, and the small last ones let the processes finish together.

    Examples
    --------
    >>> [(p.shard, p.start, p.stop) for p in plan_parts({0: 100, 1: 20}, 2)]
    [(0, 0, 30), (0, 30, 53), (0, 53, 70), (0, 70, 86), (0, 86, 100), (1, 0, 20)]
    """
    if len(sizes) >= PARTS_PER_JOB * jobs:
        return [Part(shard, 0, steps, 1) for shard, steps in sizes.items()]
    remaining = sum(sizes.values())
    parts = []
    for shard, steps in sizes.items():
        bounds = [0]
        while bounds[-1] < steps or len(bounds) == 1:  # an empty shard: one empty part
            size = max(MIN_PART_STEPS, math.ceil(remaining / (2 * jobs)))
            stop = min(steps, bounds[-1] + size)
            if steps - stop < MIN_PART_STEPS // 2:  # no sliver of a shard on its own
                stop = steps
            remaining -= stop - bounds[-1]
            bounds.append(stop)
        parts += [Part(shard, a, b, len(bounds) - 1) for a, b in itertools.pairwise(bounds)]
    return parts


def _numba_threads_started() -> bool:
    """Whether numba's threading layer runs in this process (it starts at the first call of
    a parallel kernel; the OpenMP layer cannot be forked after that)."""
    numba = sys.modules.get("numba")
    if numba is None:
        return False
    try:
        numba.threading_layer()
    except ValueError:  # "Threading layer is not initialized."
        return False
    return True


def _native_threads() -> int:
    """Threads of this process as Linux counts them (``/proc/self/status``; 1 if unknown)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        status = Path("/proc/self/status").read_text(encoding="ascii", errors="replace")
        return int(status.split("Threads:")[1].split()[0])
    return 1


#: This process's native threads once the analysis is imported (numpy's BLAS threads and
#: pyarrow's allocator thread, which both prepare for a fork): more threads later are someone
#: else's (a solver's, a user's), whose locks a forked child could find held.
THREADS_AT_IMPORT = _native_threads()


@dataclass(frozen=True)
class ProcessState:
    """What decides whether this process may fork (:func:`start_method`)."""

    platform: str
    python: tuple[int, ...]
    python_threads: int
    native_threads: int
    numba_threads: bool
    torch: bool

    @classmethod
    def now(cls) -> ProcessState:
        return cls(
            platform=sys.platform,
            python=tuple(sys.version_info[:3]),
            python_threads=threading.active_count(),
            native_threads=_native_threads(),
            numba_threads=_numba_threads_started(),
            torch="torch" in sys.modules,
        )

    def may_fork(self) -> bool:
        """The rules of :func:`start_method`."""
        return (
            self.platform.startswith("linux")
            and self.python >= (3, 11)
            and self.python_threads == 1
            and not self.numba_threads
            and not self.torch
            and self.native_threads <= (1 if self.python >= (3, 12) else THREADS_AT_IMPORT)
        )


def start_method(state: ProcessState | None = None) -> Literal["fork", "spawn"]:
    """How this process starts its workers now: ``"fork"`` where that is safe, else
    ``"spawn"``.

    A forked worker shares this process's imports (numpy, pandas, numba and the analysis:
    about 0.5 s that a spawned interpreter spends before its first part), so it starts
    working about as soon as it is made. Forking is safe only where no thread of this
    process can hold a lock the child needs, so it is chosen only
    (``state``, by default this process now)

    * on Linux, with Python 3.11 or later (a pool before 3.10.5 forks its workers on
      demand, from a thread);
    * with no Python thread but this one;
    * with numba's threading layer not started yet (its OpenMP layer aborts a forked child;
      the first parallel kernel starts it, so a second run in one process spawns);
    * with torch not imported (its thread pools);
    * with no native thread beyond those at the analysis' import (:data:`THREADS_AT_IMPORT`:
      numpy's BLAS threads and pyarrow's allocator thread, which prepare for a fork; a
      solver's or a user's are not known to). Python 3.12 and later deprecate forking a
      process with several native threads at all: there the workers are forked only where
      there is one, which numpy's import already passes, so they are spawned.

    The analysis asks at the start of a run, before it starts any thread
    (:class:`LocalProcesses` starts its workers when it is made).
    """
    return "fork" if (state or ProcessState.now()).may_fork() else "spawn"


def _start_worker() -> None:
    """Worker start-up: one numba thread per process (the processes share the cores), and an
    exit without the interpreter's teardown (``os._exit`` once the ``atexit`` handlers
    registered after this one have run): the pool's shutdown waits for its workers to end,
    and freeing numba's libraries and pandas object by object took 0.35 s of it. A worker
    writes no file that is still open when its task returns."""
    with contextlib.suppress(ImportError, ValueError):
        import numba

        numba.set_num_threads(1)
    atexit.register(os._exit, 0)


def _one_numba_thread() -> contextlib.AbstractContextManager[None]:
    """This process's compiled kernels on one thread while the workers hold the other cores."""
    from otbound._threads import numba_threads  # numba: imported where it is used

    return numba_threads(1)


class _Merger:
    """Collects the parts of each shard; a shard's outcome once all its parts are in, or its
    first error (the rest of its parts are then dropped)."""

    def __init__(self, temperatures: tuple[float, ...]) -> None:
        self._temperatures = temperatures
        self._parts: dict[int, list[tuple[int, ShardOutcome]]] = {}
        self._failed: set[int] = set()

    def add(
        self, part: Part, outcome: ShardOutcome | Exception
    ) -> Iterator[tuple[int, ShardOutcome | Exception]]:
        if part.shard in self._failed:
            return
        if isinstance(outcome, Exception):
            self._failed.add(part.shard)
            self._parts.pop(part.shard, None)
            yield part.shard, outcome
            return
        got = self._parts.setdefault(part.shard, [])
        got.append((part.start, outcome))
        if len(got) == part.of:
            del self._parts[part.shard]
            in_order = [o for _, o in sorted(got, key=lambda g: g[0])]
            yield part.shard, merge_parts(in_order, self._temperatures)


class _Feeders:
    """Threads that keep each worker process on one part at a time, taken from the front of
    a queue shared with this process; the outcomes come back through :attr:`done`. A thread
    that finds the queue empty runs ``then`` once in its worker if it ran a part there (a
    warm-up for what comes after the parts) and ends."""

    def __init__(
        self,
        workers: int,
        work: Callable[[Part], Future[Any]],
        then: Callable[[], Future[Any]] | None,
    ) -> None:
        self._work, self._then = work, then
        self.running = workers
        self._queue: deque[Part] = deque()
        self._lock = threading.Lock()
        self._stopped = False
        self.done: queue.SimpleQueue[tuple[Part, ShardOutcome | Exception] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [threading.Thread(target=self._feed, daemon=True) for _ in range(workers)]

    def start(self, parts: list[Part]) -> None:
        self._queue.extend(parts)
        for thread in self._threads:
            thread.start()

    def take(self) -> Part | None:
        """The next part, or None when there are none left (or after :meth:`stop`)."""
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def stop(self) -> None:
        """Start no more parts (the running ones end in their workers; the pool's shutdown
        waits for them)."""
        with self._lock:
            self._queue.clear()
            self._stopped = True

    def arrived(self, block: bool) -> list[tuple[Part, ShardOutcome | Exception]]:
        """The outcomes the workers have handed back (waiting for one with ``block`` while a
        worker still runs); :attr:`running` counts the threads not finished yet."""
        items = []
        while self.running and (block or not self.done.empty()):
            item = self.done.get()
            if item is None:
                self.running -= 1
            else:
                items.append(item)
                block = False
        return items

    def _feed(self) -> None:
        worked = False
        try:
            while (part := self.take()) is not None:
                worked = True
                outcome: ShardOutcome | Exception
                try:
                    outcome = self._work(part).result()
                except Exception as exc:  # to the caller, with the part it came from
                    outcome = exc
                self.done.put((part, outcome))
        finally:
            self.done.put(None)
        if self._then is not None and worked and not self._stopped:
            with contextlib.suppress(Exception):  # a warm-up: what it prepares fails later
                self._then().result()


class LocalProcesses:
    """``jobs − 1`` worker processes beside this one, for the parts of a run
    (:meth:`analyse`) and then its figures (:meth:`beside`); a context manager.

    The workers are started at once, forked where :func:`start_method` finds it safe (make
    this before any thread is started), else spawned.

    Parameters
    ----------
    jobs : int
        Processes in all, this one included (at least 2).
    warm : callable, optional
        Run once in each process, this one included, when the parts run out (module level,
        so that it pickles): the imports of what :meth:`beside` will run, done while the
        other processes finish their last parts.
    """

    def __init__(self, jobs: int, warm: Callable[[], Any] | None = None) -> None:
        if jobs < 2:
            raise ValueError(f"LocalProcesses needs jobs >= 2, got {jobs}")
        self.jobs = jobs
        self._warm = warm
        self._pool = ProcessPoolExecutor(
            jobs - 1,
            mp_context=multiprocessing.get_context(start_method()),
            initializer=_start_worker,
        )
        # a task now starts the workers (a forking pool starts them all at its first task, a
        # spawning one as tasks need them), before this process starts any thread
        for _ in range(jobs - 1):
            self._pool.submit(int)

    def __enter__(self) -> LocalProcesses:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        # after an error (a bug in a part) the running parts are not waited for: they end in
        # their workers, which then exit
        self._pool.shutdown(wait=kind is None, cancel_futures=True)

    def analyse(
        self,
        analyse: Analyse,
        dump: Dump,
        parts: list[Part],
        config: AnalysisConfig,
        progress: Callable[[int], Any],
    ) -> Generator[tuple[int, ShardOutcome | Exception], None, None]:
        """Run ``analyse(dump, shard, config, progress, steps=(start, stop))`` on every part,
        in the workers and in this process; yield ``(shard, outcome)`` for each shard once
        all its parts are done (merged in step order), or ``(shard, exception)`` at its first
        failed part.

        All processes take the parts in order from one queue, this one the first (a forked
        worker starts about as soon as this one; a spawned one imports the analysis first,
        about half a second), and a thread per worker hands it its next part as soon as it
        is done. Every process runs its kernels on one thread. Closing the generator starts
        no more parts (leaving the context waits for the running ones, unless it is left by
        an error).
        """
        merger = _Merger(config.temperatures)
        pool = self._pool

        def in_worker(part: Part) -> Future[Any]:
            return pool.submit(analyse, dump, part.shard, config, steps=(part.start, part.stop))

        def warm() -> Future[Any]:
            assert self._warm is not None
            return pool.submit(self._warm)

        feeders = _Feeders(self.jobs - 1, in_worker, None if self._warm is None else warm)

        def arrived(block: bool) -> Iterator[tuple[int, ShardOutcome | Exception]]:
            for part, outcome in feeders.arrived(block):
                if isinstance(outcome, ShardOutcome):
                    progress(outcome.steps)
                yield from merger.add(part, outcome)

        try:
            with _one_numba_thread():
                # this process takes the first part (spawned workers start later)
                feeders.start(parts[1:])
                part: Part | None = parts[0] if parts else None
                while part is not None:
                    outcome: ShardOutcome | Exception
                    try:
                        outcome = analyse(
                            dump, part.shard, config, progress, steps=(part.start, part.stop)
                        )
                    except Exception as exc:  # to the caller, as a worker's would be
                        outcome = exc
                    yield from merger.add(part, outcome)
                    yield from arrived(block=False)
                    part = feeders.take()
                if self._warm is not None and feeders.running:  # while the last parts run
                    self._warm()
                while feeders.running:  # the workers' last parts
                    yield from arrived(block=True)
        finally:
            feeders.stop()
            forget_part_shard()

    def beside(
        self, tasks: list[Callable[[], T]], meanwhile: Callable[[], object] | None = None
    ) -> list[T]:
        """``[task() for task in tasks]``: task ``i`` here when ``i + 1`` is a multiple of
        ``jobs``, the others in the workers (each task pickles: a bound method of a picklable
        object, say), handed out first; ``meanwhile()`` runs here before this process's own
        tasks."""
        mine = {i for i in range(len(tasks)) if (i + 1) % self.jobs == 0}
        there = {i: self._pool.submit(t) for i, t in enumerate(tasks) if i not in mine}
        if meanwhile is not None:
            meanwhile()
        done = {i: tasks[i]() for i in sorted(mine)}
        return [done[i] if i in done else there[i].result() for i in range(len(tasks))]
