"""The pre-provisioned pool over many scale-up/scale-down cycles (docs/models.md §7)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.core.policies import Provisioner


def test_up_down_cycles_keep_the_booted_hosts_in_the_pool() -> None:
    """Each cycle takes both pool hosts and gives them back 1 s later, well inside the 5 s boot
    of the refills: the booted hosts must come back and the refills be released, so that every
    cycle's consumers start at once (before the fix the pool held only booting refills from
    the second cycle on and every new consumer waited for a boot)."""
    prov = Provisioner(5.0, pool=2, initial=1, max_units=8)
    t = 10.0
    for _ in range(30):
        starts = [prov.add(t), prov.add(t)]
        assert [(s.source, s.ready_at) for s in starts] == [("pool", t), ("pool", t)]
        for s in reversed(starts):
            prov.remove(s.slot)
        assert len(prov.pool) == 2
        assert all(h.ready_at <= t for h in prov.pool)  # both booted
        t += 2.0


def test_a_booting_host_returns_to_the_pool_when_it_is_the_better_one() -> None:
    prov = Provisioner(5.0, pool=1, initial=0, max_units=4)
    a = prov.add(0.0)  # the pool host (ready at 0); the refill boots until 5
    b = prov.add(1.0)  # takes the refill (ready at 5); the next refill boots until 6
    assert (a.source, b.source, b.ready_at) == ("pool", "pool", 5.0)
    prov.remove(b.slot)  # its host (ready at 5) beats the pool's (ready at 6)
    assert [h.ready_at for h in prov.pool] == [5.0]
    prov.remove(a.slot)  # the booted host beats it in turn
    assert [h.ready_at for h in prov.pool] == [0.0]
    assert prov.hosts_up() == 1


@settings(max_examples=200, deadline=None)
@given(
    pool=st.integers(0, 3),
    slots=st.integers(1, 3),
    ops=st.lists(st.tuples(st.booleans(), st.floats(0.0, 4.0)), min_size=1, max_size=120),
)
def test_pool_invariants_over_random_cycles(
    pool: int, slots: int, ops: list[tuple[bool, float]]
) -> None:
    """Any sequence of adds and removals of the newest consumer, at any pace:

    - the queue removed is the one added last (``newest`` is a stack's top);
    - the pool never exceeds its size, and a host is released only when every host kept in
      the pool is ready no later than it (booted hosts are kept in preference);
    - a pool start is never later than a cold start would be.
    """
    prov = Provisioner(5.0, pool=pool, slots_per_vm=slots, initial=1, max_units=20)
    stack = list(prov.units)
    t = 0.0
    for up, dt in ops:
        t += dt
        if up and prov.count() < prov.max_units:
            s = prov.add(t)
            stack.append(s.slot)
            assert t <= s.ready_at <= t + 5.0
        elif not up and stack:
            assert prov.newest() == stack[-1]
            host = prov.hosts[prov.units[stack[-1]][1]]
            candidates = {h.id: h.ready_at for h in prov.pool}
            if len(host.slots) == 1:  # the host is left empty: it returns to the pool
                candidates[host.id] = host.ready_at
            prov.remove(stack.pop())
            kept = {h.id: h.ready_at for h in prov.pool}
            for r in candidates.keys() - kept.keys():
                assert len(kept) == pool
                assert all(ready <= candidates[r] for ready in kept.values())
        assert len(prov.pool) <= pool
        assert prov.newest() == (stack[-1] if stack else None)
        assert sorted(prov.units) == sorted(stack)
