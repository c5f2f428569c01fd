"""The pure backpressure decisions (tasks/rules/backpressure.py): hysteresis between the watermarks,
and what intake does with a trigger of each recoverability class."""

import pytest

from tasks.rules import backpressure
from tasks.rules.backpressure import ADMIT, SHED, Watermarks
from tasks.sentences import say


@pytest.mark.parametrize(
    ("pending", "shedding", "expected"),
    [
        (0, False, False),
        (99, False, False),  # below high: admit
        (100, False, True),  # at high: the 101st would exceed it, start shedding
        (250, False, True),
        (100, True, True),  # inside the band while shedding: keep shedding (hysteresis)
        (51, True, True),
        (50, True, False),  # at low: resume
        (0, True, False),
        (75, False, False),  # inside the band while admitting: keep admitting
    ],
)
def test_it_sheds_from_the_high_watermark_until_the_low_one(pending, shedding, expected):
    marks = Watermarks(high=100, low=50)
    assert backpressure.shedding_next(pending, shedding=shedding, marks=marks) is expected


def test_a_scope_without_a_high_watermark_never_sheds():
    assert backpressure.shedding_next(10**9, shedding=True, marks=Watermarks(high=None, low=None)) is False


def test_without_a_low_watermark_it_resumes_below_the_high_one():
    marks = Watermarks(high=10, low=None)
    assert backpressure.shedding_next(10, shedding=True, marks=marks) is True
    assert backpressure.shedding_next(9, shedding=True, marks=marks) is False


@pytest.mark.parametrize(
    ("recoverability", "shedding", "expected"),
    [
        ("recomputable", False, ADMIT),
        ("recomputable", True, SHED),
        ("one_time_input", True, ADMIT),  # never dropped
        ("coalesce", True, ADMIT),  # coalesced with its object's pending run instead
        ("unknown", True, ADMIT),  # a class we do not know is never shed
    ],
)
def test_only_recomputable_work_is_shed(recoverability, shedding, expected):
    assert backpressure.intake_verdict(recoverability, shedding=shedding) == expected


@pytest.mark.parametrize(
    ("high", "low", "errors"),
    [
        (100, 50, {}),
        (100, 100, {}),
        (None, None, {}),
        (50, 100, {"low_watermark": "must not be above"}),
        (None, 10, {"high_watermark": "needs a high"}),
        (0, None, {"high_watermark": "at least 1"}),
    ],
)
def test_it_names_the_field_of_a_silly_pair_of_watermarks(high, low, errors):
    found = backpressure.watermark_errors(high=high, low=low)
    assert set(found) == set(errors)
    for field, text in errors.items():
        assert text in say(found[field])
