from dataclasses import dataclass

import pytest

from workers.engine.schedule import (
    active_users_at,
    measurement_window,
    shard_user_ids,
    total_duration,
    user_window,
)


@dataclass
class P:
    users: int
    ramp_up: float
    hold: float
    ramp_down: float


RAMP = P(users=10, ramp_up=10.0, hold=20.0, ramp_down=10.0)


def test_users_start_evenly_during_ramp_up():
    assert [user_window(k, RAMP)[0] for k in range(10)] == [float(k) for k in range(10)]


def test_the_last_user_to_start_is_the_first_to_stop():
    stops = [user_window(k, RAMP)[1] for k in range(10)]

    assert stops[-1] == 30.0  # end of the hold
    assert stops[0] == 39.0
    assert stops == sorted(stops, reverse=True)


@pytest.mark.parametrize(
    ("t", "active"),
    [(0.0, 1), (0.5, 1), (4.5, 5), (9.99, 10), (10.0, 10), (29.99, 10), (30.0, 9), (34.5, 5), (39.0, 0), (40.0, 0)],
)
def test_active_users_ramp_up_hold_and_down_linearly(t, active):
    assert active_users_at(t, RAMP) == active


def test_without_ramp_down_everybody_stops_at_the_end_of_the_hold():
    p = P(users=4, ramp_up=0.0, hold=5.0, ramp_down=0.0)

    assert [active_users_at(t, p) for t in (0.0, 4.99, 5.0)] == [4, 4, 0]


def test_two_shards_add_up_to_the_whole_ramp():
    shards = [shard_user_ids(10, 2, 0), shard_user_ids(10, 2, 1)]

    assert sorted(shards[0] + shards[1]) == list(range(10))
    for tenth in range(0, 420):
        t = tenth / 10
        assert active_users_at(t, RAMP, shards[0]) + active_users_at(t, RAMP, shards[1]) == active_users_at(t, RAMP)
    # interleaved: both shards ramp up together rather than one after the other
    assert active_users_at(4.5, RAMP, shards[0]) == 3
    assert active_users_at(4.5, RAMP, shards[1]) == 2


def test_durations_and_measurement_window():
    assert total_duration(RAMP) == 40.0
    assert measurement_window(RAMP) == (10.0, 30.0)


def test_a_user_number_outside_the_profile_is_refused():
    with pytest.raises(ValueError, match="outside"):
        user_window(10, RAMP)
