from shipyard.reconcile.leader import LeaseState, Seen, Step, decide, must_stop, renew_timeout

ME = "op-b"


def lease(holder: str | None = "op-a", renew: str | None = "t1",
          duration: float | None = 15) -> LeaseState:
    return LeaseState(holder=holder, renew_time=renew, duration_sec=duration)


def test_no_lease_is_created() -> None:
    assert decide(ME, None, now=100.0, seen=None, default_duration=15).step is Step.CREATE


def test_our_own_lease_is_renewed_at_once() -> None:
    # e.g. a restarted container keeps its pod's name: it holds the lease already
    assert decide(ME, lease(holder=ME), now=100.0, seen=None,
                  default_duration=15).step is Step.RENEW


def test_a_released_lease_is_taken_over_at_once() -> None:
    for holder in (None, ""):
        assert decide(ME, lease(holder=holder), 100.0, None, 15).step is Step.TAKE_OVER


def test_a_lease_seen_for_the_first_time_is_waited_for_a_whole_duration() -> None:
    d = decide(ME, lease(), now=100.0, seen=None, default_duration=15)
    assert d.step is Step.WAIT
    assert d.seen == Seen("op-a", "t1", 100.0)
    assert d.wait_sec == 15


def test_an_unchanged_record_expires_after_its_duration_by_our_clock() -> None:
    seen = Seen("op-a", "t1", 100.0)
    d = decide(ME, lease(), now=110.0, seen=seen, default_duration=15)
    assert (d.step, d.wait_sec) == (Step.WAIT, 5)
    assert decide(ME, lease(), now=115.0, seen=seen, default_duration=15).step is Step.TAKE_OVER


def test_a_renewal_restarts_the_wait() -> None:
    seen = Seen("op-a", "t1", 100.0)
    d = decide(ME, lease(renew="t2"), now=114.0, seen=seen, default_duration=15)
    assert d.step is Step.WAIT
    assert d.seen == Seen("op-a", "t2", 114.0)
    assert decide(ME, lease(renew="t2"), 128.9, d.seen, 15).step is Step.WAIT
    assert decide(ME, lease(renew="t2"), 129.0, d.seen, 15).step is Step.TAKE_OVER


def test_a_new_holder_restarts_the_wait() -> None:
    seen = Seen("op-a", "t1", 100.0)
    d = decide(ME, lease(holder="op-c", renew="t1"), 120.0, seen, 15)
    assert (d.step, d.seen) == (Step.WAIT, Seen("op-c", "t1", 120.0))


def test_the_lease_duration_wins_over_the_default() -> None:
    seen = Seen("op-a", "t1", 100.0)
    assert decide(ME, lease(duration=5), 105.0, seen, 15).step is Step.TAKE_OVER
    assert decide(ME, lease(duration=None), 105.0, seen, 15).step is Step.WAIT
    assert decide(ME, lease(duration=0), 105.0, seen, 15).step is Step.WAIT


def test_the_holder_stops_at_its_renew_deadline() -> None:
    assert not must_stop(last_renewed=100.0, now=109.9, renew_deadline=10)
    assert must_stop(last_renewed=100.0, now=110.0, renew_deadline=10)
    assert must_stop(last_renewed=None, now=0.0, renew_deadline=10)


def test_the_holder_stops_before_any_candidate_can_take_over() -> None:
    """The holder sends its last renewal at 100; a candidate sees it no earlier than that. With
    a renew deadline shorter than the duration, the holder is gone first."""
    duration, deadline = 15.0, 10.0
    first_takeover = next(t / 10 for t in range(1000, 2000)
                          if decide(ME, lease(), t / 10, Seen("op-a", "t1", 100.0),
                                    duration).step is Step.TAKE_OVER)
    first_stop = next(t / 10 for t in range(1000, 2000) if must_stop(100.0, t / 10, deadline))
    assert first_stop < first_takeover


def test_a_renewal_may_take_until_the_renew_deadline() -> None:
    """As client-go's: a slow apiserver's answer within the deadline still renews."""
    assert renew_timeout(100.0, 102.0, 10.0, 2.0) == 8.0
    assert renew_timeout(100.0, 109.5, 10.0, 2.0) == 2.0  # never less than the retry period
    assert renew_timeout(None, 5.0, 10.0, 2.0) == 2.0
