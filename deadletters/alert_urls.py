"""Where may an alert channel send? Only under a URL root of HARNESS_ALERT_URL_ALLOW (tasks/outbound.py:
the agents' matching, with a query string allowed for webhook tokens). Checked when a channel is saved
(model validation: the admin form and anything that calls full_clean) and again before every delivery,
so a row changed behind validation's back sends nothing. And where does an alert link to (admin_link)?"""

from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext

from tasks.outbound import plain_url_error, url_allow_error

SETTING = "HARNESS_ALERT_URL_ALLOW"


def alert_url_error(url: str) -> str | None:
    """Why alerts may not be sent to `url` (in English, for the outbox and logs), or None when allowed."""
    return url_allow_error(url, settings.HARNESS_ALERT_URL_ALLOW, setting=SETTING, what="alerts", query=True)


def alert_url_message(url: str) -> str:
    """The refusal for a form field, in the user's language; never the URL (it may carry a token)."""
    if plain_url_error(url, query=True) is not None:
        return gettext(
            "Not a plain URL: no user:password, fragment, ; path parameters, backslashes, percent-encoded "
            "separators or dots, . or .. segments, or characters outside ASCII."
        )
    return gettext(
        "Not allowed: this deployment sends alerts only to the URLs listed in HARNESS_ALERT_URL_ALLOW. "
        "Ask whoever runs the harness to add the receiver's host there."
    )


def admin_link(viewname: str, *args: object) -> str:
    """The absolute address of an admin page, for an alert's link (HARNESS ADMIN_BASE_URL)."""
    return settings.HARNESS["ADMIN_BASE_URL"].rstrip("/") + reverse(viewname, args=args)
