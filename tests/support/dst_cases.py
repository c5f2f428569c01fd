"""The DST days the schedule is tested on, as (zone, local day, cron, {policy: UTC slots that day}).

Expected instants are written out in UTC so that a wrong conversion cannot agree with itself. The
schedule tests check them (tests/tasks/rules/test_schedule.py) and so does the plan's replay of history
(tests/tasks/rules/test_plan_replay.py), which must agree with the schedule on every one of them.
"""

from datetime import UTC, date, datetime

from tasks.rules.schedule import DST_REPEAT_POLICIES

NY, BERLIN, LORD_HOWE, SHANGHAI = (
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Shanghai",
)


def u(*args: int) -> datetime:
    """A UTC instant."""
    return datetime(*args, tzinfo=UTC)


# --- spring forward: the wall-clock hour that does not exist -------------------------------

NY_EVEN_HOURS = [u(2026, 3, 8, h) for h in range(10, 24, 2)] + [u(2026, 3, 9, 0), u(2026, 3, 9, 2)]
GAP_CASES = [
    # (tz, day, expr, {policy: expected UTC slots on that local day})
    (NY, date(2026, 3, 8), "30 2 * * *", {"shift": [u(2026, 3, 8, 7)], "skip": []}),
    (NY, date(2026, 3, 8), "0 2 * * *", {"shift": [u(2026, 3, 8, 7)], "skip": []}),
    (NY, date(2026, 3, 8), "59 2 * * *", {"shift": [u(2026, 3, 8, 7)], "skip": []}),
    (NY, date(2026, 3, 8), "*/15 2 * * *", {"shift": [u(2026, 3, 8, 7)], "skip": []}),
    (NY, date(2026, 3, 8), "0 2,3 * * *", {"shift": [u(2026, 3, 8, 7)], "skip": [u(2026, 3, 8, 7)]}),
    (NY, date(2026, 3, 8), "30 1 * * *", {"shift": [u(2026, 3, 8, 6, 30)], "skip": [u(2026, 3, 8, 6, 30)]}),
    (NY, date(2026, 3, 8), "0 3 * * *", {"shift": [u(2026, 3, 8, 7)], "skip": [u(2026, 3, 8, 7)]}),
    (NY, date(2026, 3, 8), "0 9 * * *", {"shift": [u(2026, 3, 8, 13)], "skip": [u(2026, 3, 8, 13)]}),
    (NY, date(2026, 3, 8), "0 */2 * * *", {
        "shift": [u(2026, 3, 8, 5), u(2026, 3, 8, 7), u(2026, 3, 8, 8), *NY_EVEN_HOURS],
        "skip": [u(2026, 3, 8, 5), u(2026, 3, 8, 8), *NY_EVEN_HOURS],
    }),
    (BERLIN, date(2026, 3, 29), "30 2 * * *", {"shift": [u(2026, 3, 29, 1)], "skip": []}),
    (BERLIN, date(2026, 3, 29), "*/15 2 * * *", {"shift": [u(2026, 3, 29, 1)], "skip": []}),
    (BERLIN, date(2026, 3, 29), "30 1 * * *", {"shift": [u(2026, 3, 29, 0, 30)], "skip": [u(2026, 3, 29, 0, 30)]}),
    (BERLIN, date(2026, 3, 29), "0 9 * * *", {"shift": [u(2026, 3, 29, 7)], "skip": [u(2026, 3, 29, 7)]}),
    # Lord Howe moves by 30 minutes: 02:00-02:29 does not exist, 02:30 does.
    (LORD_HOWE, date(2026, 10, 4), "0 2 * * *", {"shift": [u(2026, 10, 3, 15, 30)], "skip": []}),
    (LORD_HOWE, date(2026, 10, 4), "15 2 * * *", {"shift": [u(2026, 10, 3, 15, 30)], "skip": []}),
    (LORD_HOWE, date(2026, 10, 4), "30 2 * * *", {"shift": [u(2026, 10, 3, 15, 30)], "skip": [u(2026, 10, 3, 15, 30)]}),
    (LORD_HOWE, date(2026, 10, 4), "*/15 2 * * *", {
        "shift": [u(2026, 10, 3, 15, 30), u(2026, 10, 3, 15, 45)],
        "skip": [u(2026, 10, 3, 15, 30), u(2026, 10, 3, 15, 45)],
    }),
    (LORD_HOWE, date(2026, 10, 4), "45 1 * * *", {"shift": [u(2026, 10, 3, 15, 15)], "skip": [u(2026, 10, 3, 15, 15)]}),
]  # fmt: skip


# --- fall back: the wall-clock hour that happens twice ----------------------------------------

NY_F, BE_F, LH_F = date(2026, 11, 1), date(2026, 10, 25), date(2026, 4, 5)


def same(slots: list[datetime]) -> dict[str, list[datetime]]:
    """The same slots under every repeat policy (the wall time is not repeated)."""
    return {policy: list(slots) for policy in DST_REPEAT_POLICIES}


BERLIN_ODD_HOURS = [u(2026, 10, 25, h) for h in range(3, 23, 2)]
REPEAT_CASES = [
    # (tz, day, expr, {policy: expected UTC slots on that local day})
    (NY, NY_F, "30 1 * * *", {
        "first": [u(2026, 11, 1, 5, 30)],
        "last": [u(2026, 11, 1, 6, 30)],
        "both": [u(2026, 11, 1, 5, 30), u(2026, 11, 1, 6, 30)],
    }),
    (NY, NY_F, "0 1 * * *", {
        "first": [u(2026, 11, 1, 5)],
        "last": [u(2026, 11, 1, 6)],
        "both": [u(2026, 11, 1, 5), u(2026, 11, 1, 6)],
    }),
    (NY, NY_F, "*/15 1 * * *", {
        "first": [u(2026, 11, 1, 5, m) for m in (0, 15, 30, 45)],
        "last": [u(2026, 11, 1, 6, m) for m in (0, 15, 30, 45)],
        "both": [u(2026, 11, 1, h, m) for h in (5, 6) for m in (0, 15, 30, 45)],
    }),
    (NY, NY_F, "30 2 * * *", same([u(2026, 11, 1, 7, 30)])),
    (NY, NY_F, "30 0 * * *", same([u(2026, 11, 1, 4, 30)])),
    (NY, NY_F, "0 9 * * *", same([u(2026, 11, 1, 14)])),
    (BERLIN, BE_F, "30 2 * * *", {
        "first": [u(2026, 10, 25, 0, 30)],
        "last": [u(2026, 10, 25, 1, 30)],
        "both": [u(2026, 10, 25, 0, 30), u(2026, 10, 25, 1, 30)],
    }),
    (BERLIN, BE_F, "*/15 2 * * *", {
        "first": [u(2026, 10, 25, 0, m) for m in (0, 15, 30, 45)],
        "last": [u(2026, 10, 25, 1, m) for m in (0, 15, 30, 45)],
        "both": [u(2026, 10, 25, h, m) for h in (0, 1) for m in (0, 15, 30, 45)],
    }),
    (BERLIN, BE_F, "0 */2 * * *", {
        "first": [u(2026, 10, 24, 22), u(2026, 10, 25, 0), *BERLIN_ODD_HOURS],
        "last": [u(2026, 10, 24, 22), u(2026, 10, 25, 1), *BERLIN_ODD_HOURS],
        "both": [u(2026, 10, 24, 22), u(2026, 10, 25, 0), u(2026, 10, 25, 1), *BERLIN_ODD_HOURS],
    }),
    (BERLIN, BE_F, "30 1 * * *", same([u(2026, 10, 24, 23, 30)])),
    (BERLIN, BE_F, "0 9 * * *", same([u(2026, 10, 25, 8)])),
    # Lord Howe repeats only 01:30-01:59 (+11:00 then +10:30).
    (LORD_HOWE, LH_F, "45 1 * * *", {
        "first": [u(2026, 4, 4, 14, 45)],
        "last": [u(2026, 4, 4, 15, 15)],
        "both": [u(2026, 4, 4, 14, 45), u(2026, 4, 4, 15, 15)],
    }),
    (LORD_HOWE, LH_F, "*/15 1 * * *", {
        "first": [u(2026, 4, 4, 14, m) for m in (0, 15, 30, 45)],
        "last": [u(2026, 4, 4, 14, 0), u(2026, 4, 4, 14, 15), u(2026, 4, 4, 15, 0), u(2026, 4, 4, 15, 15)],
        "both": [u(2026, 4, 4, 14, m) for m in (0, 15, 30, 45)] + [u(2026, 4, 4, 15, 0), u(2026, 4, 4, 15, 15)],
    }),
    (LORD_HOWE, LH_F, "15 1 * * *", same([u(2026, 4, 4, 14, 15)])),
    (LORD_HOWE, LH_F, "0 2 * * *", same([u(2026, 4, 4, 15, 30)])),
]  # fmt: skip
