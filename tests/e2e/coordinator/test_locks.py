"""Table locks (AcquireLock / ReleaseLock) of a coordinator subprocess, with clients waiting for a
held lock: a release must hand the lock on at once."""

from __future__ import annotations

import threading
import time
from typing import Any

from inlet.services.coordinator_client.client import CoordinatorCallError

WORKERS = 4


def contend(e2e: Any, waiters: int) -> tuple[float, list[tuple[str, float, int]]]:
    """A holder takes the lock; ``waiters`` clients (threads, one channel each) wait for it (up to
    8 s); 0.5 s later the holder releases it. Returns (seconds the release took, [(waiter, seconds
    from the release to its grant or failure, fencing token or -1)])."""
    coordinator = e2e.coordinator(max_workers=WORKERS)
    path = e2e.cow_table("locked")
    with e2e.client(coordinator) as client:
        client.register_table("locked", str(path))
        held = client.acquire_lock("locked", "holder", lease_ms=30_000)
        got: list[tuple[str, float, int]] = []
        released_at: list[float] = []

        def wait(name: str) -> None:
            with e2e.client(coordinator) as own:
                try:
                    lease = own.acquire_lock("locked", name, lease_ms=60_000, wait_ms=8_000)
                    token = lease.fencing_token
                except CoordinatorCallError:
                    token = -1
                got.append((name, time.monotonic() - (released_at or [time.monotonic()])[0], token))

        threads = [threading.Thread(target=wait, args=(f"w{i}",), daemon=True) for i in range(waiters)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        released_at.append(time.monotonic())
        client.release_lock("locked", held.lock_id)
        release_s = time.monotonic() - released_at[0]
        for t in threads:
            t.join(30)
    return release_s, got


def test_release_hands_the_lock_to_one_waiter_at_once(e2e: Any) -> None:
    """Fewer waiters than the server's worker threads: the release is immediate, exactly one waiter
    gets the lock (with a larger fencing token) within a second, the others time out (ABORTED)."""
    release_s, got = contend(e2e, WORKERS - 2)
    assert release_s < 1.0, release_s
    winners = [g for g in got if g[2] > 0]
    assert len(winners) == 1 and winners[0][1] < 1.0 and winners[0][2] == 2, got


def test_release_is_not_starved_by_as_many_waiters_as_worker_threads(e2e: Any) -> None:
    """As many waiters as the server has worker threads: the holder's release must still be served at
    once, and one waiter get the lock."""
    release_s, got = contend(e2e, WORKERS)
    assert release_s < 1.0, f"the release took {release_s:.1f} s"
    assert any(g[2] > 0 for g in got), got


def test_many_more_waiters_than_worker_threads_still_wait_their_whole_time(e2e: Any) -> None:
    """Three times as many waiters as worker threads: the server lets only some of them wait on its
    threads, the others are told to retry and wait on their client's side. The release is still
    served at once, exactly one waiter gets the lock (the next fencing token), and every other
    waiter keeps trying for its whole wait (8 s from its start, 7.5 s after the release) before
    it fails: an early ABORTED from a busy server is not the end of a client's wait."""
    release_s, got = contend(e2e, 3 * WORKERS)
    assert release_s < 1.0, f"the release took {release_s:.1f} s"
    assert len(got) == 3 * WORKERS, got
    winners = [g for g in got if g[2] > 0]
    assert len(winners) == 1 and winners[0][1] < 1.0 and winners[0][2] == 2, got
    losers = [g for g in got if g[2] < 0]
    assert losers and all(6.5 < g[1] < 10.0 for g in losers), got
