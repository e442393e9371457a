"""The task queue's clock on a shared journal: the server's time read through this
daemon's clock, measured again when the offset is old or the local clock stepped."""

from __future__ import annotations

from palyra.core.clock import RESYNC_MS, STEP_MS, ServerClock


class Clocks:
    """A server clock and a daemon's wall and monotonic clocks, moved by the test."""

    def __init__(self, server: int, skew: int) -> None:
        self.server = server
        self.skew = skew  # the daemon's wall clock minus the server's
        self.mono = 5_000
        self.asked = 0

    def server_ms(self) -> int:
        self.asked += 1
        return self.server

    def local_ms(self) -> int:
        return self.server + self.skew

    def pass_ms(self, ms: int) -> None:
        self.server += ms
        self.mono += ms


def test_a_skewed_clock_reads_the_servers_time_and_asks_it_once_per_resync() -> None:
    clocks = Clocks(server=1_700_000_000_000, skew=3_600_000)
    clock = ServerClock(clocks.server_ms, clocks.local_ms, lambda: clocks.mono)
    assert clock() == clocks.server
    for _ in range(9):
        clocks.pass_ms(RESYNC_MS // 10)
        assert clock() == clocks.server
    assert clocks.asked == 1  # the offset held: no query per reading
    clocks.pass_ms(RESYNC_MS // 10)
    assert clock() == clocks.server
    assert clocks.asked == 2  # old enough: measured again


def test_a_step_of_the_local_clock_is_noticed_at_the_next_reading() -> None:
    clocks = Clocks(server=1_700_000_000_000, skew=0)
    clock = ServerClock(clocks.server_ms, clocks.local_ms, lambda: clocks.mono)
    clock()
    clocks.pass_ms(1_000)
    clocks.skew = -5 * STEP_MS  # the wall clock steps back (NTP, an operator)
    assert clock() == clocks.server
    clocks.skew = 5 * STEP_MS  # and forward
    assert clock() == clocks.server
    assert clocks.asked == 3


def test_without_a_server_clock_the_local_clock_is_the_clock() -> None:
    clock = ServerClock(lambda: None, lambda: 42, lambda: 0)
    assert clock() == 42


def test_a_failed_reading_keeps_the_last_offset_and_tries_again_later() -> None:
    clocks = Clocks(server=1_700_000_000_000, skew=-7_000)
    down = False

    def server_ms() -> int:
        if down:
            raise ConnectionError("the database is away")
        return clocks.server_ms()

    clock = ServerClock(server_ms, clocks.local_ms, lambda: clocks.mono)
    assert clock() == clocks.server
    down = True
    clocks.pass_ms(RESYNC_MS)
    assert clock() == clocks.server  # measured before: still the server's time
    down = False
    clocks.pass_ms(RESYNC_MS // 2)
    assert clock() == clocks.server and clocks.asked == 1  # no retry before RESYNC_MS
    clocks.pass_ms(RESYNC_MS // 2)
    assert clock() == clocks.server and clocks.asked == 2
