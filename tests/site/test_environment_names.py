"""A setting's name is written once, where it is read: the "unknown HARNESS_* variable" check takes
its list from the reads (harness_site/environment.py), and .env.example lists each one."""

import re

from harness_site import settings as site
from harness_site.environment import Environment
from tests.support.processes import ROOT


def test_a_name_that_was_read_is_known():
    env = Environment({"HARNESS_TICK_SECONDS": "2"})
    env.whole("HARNESS_TICK_SECONDS", default=1, low=1, high=10)

    env.refuse_unread("HARNESS_", besides="HARNESS_SECRET_")

    assert env.problems == []


def test_a_name_no_reader_asked_for_is_refused_with_the_closest_read_one():
    env = Environment({"HARNESS_TICK_SECONDZ": "2", "HARNESS_SECRET_BILLING": "s3cret", "PATH": "/bin"})
    env.whole("HARNESS_TICK_SECONDS", default=1, low=1, high=10)
    env.text("HARNESS_SECRET_PREFIX", default="HARNESS_SECRET_")

    env.refuse_unread("HARNESS_", besides="HARNESS_SECRET_")

    assert env.problems == [
        "HARNESS_TICK_SECONDZ: unknown setting (did you mean HARNESS_TICK_SECONDS? .env.example lists every one)"
    ]


def test_a_name_read_with_a_bad_value_is_refused_for_its_value_only():
    env = Environment({"HARNESS_TICK_SECONDS": "zero"})
    env.whole("HARNESS_TICK_SECONDS", default=1, low=1, high=10)

    env.refuse_unread("HARNESS_", besides="HARNESS_SECRET_")

    assert len(env.problems) == 1 and "not a whole number" in env.problems[0]


def test_every_name_the_settings_read_is_in_env_example():
    listed = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), flags=re.MULTILINE))

    assert site.env.names - listed == set()
    assert {n for n in site.env.names if n.startswith("HARNESS_")} >= {"HARNESS_TICK_SECONDS", "HARNESS_PORT"}
