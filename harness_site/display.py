"""How the desk shows time: every instant labelled with its zone, so no one reads UTC as local.

Each operator picks a display zone, remembered per user (audit.DeskPreference):
- "rule" (the default): where a rule is in context, its zone with UTC beside it; elsewhere UTC;
- "utc": UTC everywhere, the rule's zone beside it where a rule is in context;
- "browser": the zone the browser reports (Intl), UTC beside it.
The middleware activates the chosen zone for the request, so Django's own date rendering (lists,
read-only fields, the date hierarchy) prints it too; the formats in harness_site/formats label it."""

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.http import HttpResponseRedirect
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from harness_site.audit.models import DeskPreference

BROWSER_ZONE_COOKIE = "harness_browser_zone"  # set by static/harness/desk.js from Intl
STAMP = "%Y-%m-%d %H:%M:%S %Z"


def zone_or_none(name: str) -> tzinfo | None:
    """The IANA zone called `name`, or None for an unknown or malformed name (never raises)."""
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def preference_of(user) -> DeskPreference:
    """The user's saved preference, or an unsaved default one ("rule")."""
    if not getattr(user, "is_authenticated", False):
        return DeskPreference(display_zone=DeskPreference.Zone.RULE)
    found = DeskPreference.objects.filter(user=user).first()
    return found or DeskPreference(user=user, display_zone=DeskPreference.Zone.RULE)


class DisplayZoneMiddleware:
    """Activates the user's display zone for the request; after the auth middleware."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/admin/"):
            pref = preference_of(request.user)
            request.display_zone = pref.display_zone
            zone = zone_or_none(pref.browser_zone) if pref.display_zone == DeskPreference.Zone.BROWSER else None
            request.display_tz = zone or UTC
            if zone is not None:
                timezone.activate(zone)
                try:
                    return self.get_response(request)
                finally:
                    timezone.deactivate()
        return self.get_response(request)


@require_POST
def display_zone_view(request):
    """Saves the user's display zone (the switch in the page header) and goes back."""
    choice = request.POST.get("zone", "")
    if choice in DeskPreference.Zone.values and request.user.is_authenticated:
        browser = request.POST.get("browser_zone") or request.COOKIES.get(BROWSER_ZONE_COOKIE, "")
        DeskPreference.objects.update_or_create(
            user=request.user,
            defaults={"display_zone": choice, "browser_zone": browser if zone_or_none(browser) else ""},
        )
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = "/admin/"
    return HttpResponseRedirect(back)


def zones_for(request, rule_zone: str | None) -> tuple[tzinfo, tzinfo | None]:
    """(primary, secondary) zones for an instant on this page: secondary is None when it would repeat."""
    rule_tz = zone_or_none(rule_zone or "")
    primary: tzinfo
    choice = getattr(request, "display_zone", DeskPreference.Zone.RULE)
    if request is None:  # an admin list column: the zone the middleware activated (UTC or the browser's)
        current = timezone.get_current_timezone()
        primary = UTC if str(current) in ("UTC", "Etc/UTC") else current
        choice = None
    if choice is None:
        pass
    elif choice == DeskPreference.Zone.BROWSER:
        primary = getattr(request, "display_tz", UTC)
    elif choice == DeskPreference.Zone.UTC:
        primary = UTC
    else:
        primary = rule_tz or UTC
    secondary = UTC if primary is not UTC else rule_tz
    if secondary is not None and _same_zone(primary, secondary):
        secondary = None
    return primary, secondary


def _same_zone(a: tzinfo, b: tzinfo) -> bool:
    return str(a) == str(b) or {str(a), str(b)} <= {"UTC", "Etc/UTC"}


def stamp(at: datetime, zone: tzinfo) -> str:
    """An instant on `zone`'s clock, to the second, with the zone's abbreviation: 2026-12-02 09:00:00 CST."""
    local = at.astimezone(zone)
    text = local.strftime(STAMP)
    name = local.tzname() or ""
    if name[:1] in "+-":  # zones without an abbreviation print "+04": say which zone that is
        text = f"{local:%Y-%m-%d %H:%M:%S} {zone} (UTC{name})"
    return text
