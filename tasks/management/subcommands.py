"""`manage.py harness flags|explain|preview|ping|token`: mixed into the harness command."""

import json

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.translation import gettext as _

from harness_site.api.tokens import token_create
from tasks import sentences, services
from tasks.flags import FlagError, flag_clear, flag_json, flag_list, flag_set
from tasks.models import TriggerRule
from tasks.rules.preview import StartError, preview_start, rule_preview
from tasks.triggers.explain import SlotParseError, parse_slot, slot_explain, trigger_explain
from tasks.triggers.heartbeat import rule_ping
from tasks.triggers.plan import plan_json


def add_guard_parsers(sub) -> None:
    flags = sub.add_parser("flags", help="set, clear or list readiness flags")
    flags_sub = flags.add_subparsers(dest="flags_command", required=True)
    for name, text in (
        ("set", "set NAME for SCOPE (a business date such as 2026-12-01, or a key)"),
        ("clear", "clear NAME for SCOPE"),
    ):
        p = flags_sub.add_parser(name, help=text)
        p.add_argument("name")
        p.add_argument("scope")
        p.add_argument("--actor", default="cli")
        if name == "set":
            p.add_argument("--note", default="")
    p = flags_sub.add_parser("list", help="flags that are set")
    p.add_argument("--name")
    p.add_argument("--scope")
    p.add_argument("--json", action="store_true", dest="as_json")

    explain = sub.add_parser("explain", help="why did or didn't RULE run at SLOT (or for a trigger, --biz-key)?")
    explain.add_argument("rule")
    explain.add_argument("slot", nargs="?", help="ISO 8601; without an offset it is read in the rule's timezone")
    explain.add_argument("--biz-key", default="", help="a trigger by its business key: shed, coalesced or run")
    explain.add_argument("--json", action="store_true", dest="as_json")

    preview = sub.add_parser("preview", help="the next fires of RULE across DST changes and windows")
    preview.add_argument("rule")
    preview.add_argument("--next", type=int, default=10, dest="count")
    preview.add_argument("--from", default="", dest="start", help="start on this day (YYYY-MM-DD, the rule's zone)")

    ping = sub.add_parser("ping", help="heartbeat ping for RULE (a heartbeat rule)")
    ping.add_argument("rule")

    token = sub.add_parser("token", help="create an API token for USER (printed once)")
    token.add_argument("action", choices=["create"])
    token.add_argument("name")
    token.add_argument("--user", required=True)
    token.add_argument(
        "--scope",
        action="append",
        dest="scopes",
        help="REST API scope, repeatable (rules:read, rules:write, runs:read, runs:write, deadletters:read, "
        "deadletters:write); none given: all of the user's permissions",
    )


def _rule(name: str) -> TriggerRule:
    try:
        return TriggerRule.objects.get(name=name)
    except TriggerRule.DoesNotExist:
        raise CommandError(f"no rule named {name!r}") from None


class GuardCommandsMixin(BaseCommand):
    def _flags(self, *, flags_command, **opts):
        try:
            if flags_command == "set":
                flag, created = flag_set(
                    name=opts["name"], scope=opts["scope"], note=opts["note"], actor=opts["actor"], now=timezone.now()
                )
                self.stdout.write(f"{'set' if created else 'already set (refreshed)'}: {flag.name} for {flag.scope}")
            elif flags_command == "clear":
                cleared = flag_clear(name=opts["name"], scope=opts["scope"], actor=opts["actor"])
                self.stdout.write(f"{'cleared' if cleared else 'was not set'}: {opts['name']} for {opts['scope']}")
            else:
                rows = [flag_json(f) for f in flag_list(name=opts["name"], scope=opts["scope"])]
                if opts["as_json"]:
                    self.stdout.write(json.dumps(rows, indent=2))
                for r in [] if opts["as_json"] else rows:
                    self.stdout.write(f"{r['name']}  {r['scope']}  set {r['set_at']} by {r['set_by'] or '-'}")
        except FlagError as exc:
            raise CommandError(str(exc)) from None

    def _explain(self, *, rule, slot, as_json, biz_key="", **opts):
        obj = _rule(rule)
        if biz_key:
            result = trigger_explain(rule=obj, biz_key=biz_key, now=timezone.now())
        elif slot:
            try:
                at = parse_slot(slot, rule=obj)
            except SlotParseError as exc:
                raise CommandError(str(exc)) from None
            result = slot_explain(rule=obj, slot=at, now=timezone.now())
        else:
            raise CommandError("give a SLOT, or --biz-key for a trigger")
        if as_json:
            self.stdout.write(json.dumps(result, indent=2, cls=DjangoJSONEncoder))
            return
        if biz_key:
            self.stdout.write(f"{obj.name} trigger {biz_key}")
        else:
            self.stdout.write(f"{obj.name} @ {result['slot_local']} ({result['slot_utc']})")
        self.stdout.write(f"  {result['outcome']}: {result['summary']}")
        if result["reason"]:
            self.stdout.write(f"  reason: {result['reason']}")
        for key, value in (result.get("details") or {}).items():
            self.stdout.write(f"  {key}: {value}")

    def _preview(self, *, rule, count, start="", **opts):
        obj = _rule(rule)
        if count < 1 or count > 1000:
            raise CommandError("--next must be between 1 and 1000")
        now = at = timezone.now()
        if start:
            try:
                at = preview_start(start, timezone=obj.timezone)
            except StartError as exc:
                raise CommandError(f"--from: {sentences.say(exc.reason)}") from None
        for fire in rule_preview(obj, at=at, count=count, now=now).fires:
            note = f"  [{sentences.say(fire.note)}]" if fire.note else ""
            note += f"  [{sentences.say(fire.start)}]" if fire.start else ""
            self.stdout.write(
                f"{fire.local:%a %Y-%m-%d %H:%M %Z}  {fire.utc:%Y-%m-%dT%H:%MZ}  {sentences.say(fire.guards)}{note}"
            )

    def _ping(self, *, rule, **opts):
        try:
            deadline = rule_ping(rule=_rule(rule), now=timezone.now())
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"pinged {rule}; fires if silent until {deadline.isoformat()}")

    def _token(self, *, action, name, user, scopes=None, **opts):
        found = get_user_model().objects.filter(username=user).first()
        if found is None:
            raise CommandError(f"no user named {user!r}")
        try:
            token = token_create(name=name, user=found, now=timezone.now(), scopes=scopes)
        except ValidationError as exc:
            raise CommandError("; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items())) from None
        self.stdout.write(f"token {name!r} for {user} (shown once, store it now): {token}")


MAX_PLAN_DAYS = 60
# Differing slots and fires listed per rule in text (all of them are counted, and in --json listed).
PLAN_ROWS_SHOWN = 20


def rules_plan_print(command, text, *, days: int, allow: bool, as_json: bool) -> None:
    """`harness rules plan FILE`: each rule's plan; CommandError (exit 1) on a dangerous consequence
    unless `allow`, or when the file itself is refused."""
    if not 1 <= days <= MAX_PLAN_DAYS:
        raise CommandError(f"--days must be from 1 to {MAX_PLAN_DAYS}, not {days}")
    try:
        staged = services.rule_import_stage(text)
    except services.RuleImportError as exc:
        raise CommandError("rules rejected:\n  " + "\n  ".join(exc.errors)) from None
    plans = services.rule_import_plans(staged, now=timezone.now(), days=days)
    unchanged = [rule.name for rule, _created, changed, _pools in staged.rules if not changed]
    if as_json:
        doc = {
            "rules": [{"name": p.name, "created": p.created, **plan_json(p.plan, zone=p.zone)} for p in plans],
            "unchanged": unchanged,
        }
        command.stdout.write(json.dumps(doc, indent=2, cls=DjangoJSONEncoder, ensure_ascii=False))
    else:
        for p in plans:
            command.stdout.write(_plan_text(p))
        if unchanged:
            command.stdout.write(_("unchanged: %(names)s") % {"names": ", ".join(unchanged)})
        if not plans:
            command.stdout.write(_("No rule would change."))
    dangerous = [p.name for p in plans if p.plan.dangerous]
    if dangerous and not allow:
        raise CommandError(
            _("dangerous consequences in %(names)s: review them, then import with --allow")
            % {"names": ", ".join(dangerous)}
        )


def _plan_text(p) -> str:
    data = plan_json(p.plan, zone=p.zone, rows=PLAN_ROWS_SHOWN)
    head = _("rule %(name)s: new") if p.created else _("rule %(name)s: changed")
    lines = [head % {"name": p.name}]
    for c in data["changes"]:
        lines.append(f"  ~ {c['field']}: {c['old']!r} -> {c['new']!r}")
    for c in data["consequences"]:
        lines.append(("  ! " if c["dangerous"] else "  - ") + c["summary"])
    lines += [f"  - {r}" for r in data["remarks"]]
    lines.append("  " + _("past: %(summary)s") % {"summary": data["past"]["summary"]})
    for r in data["past"]["rows"]:
        why = f" ({r['why']})" if r["why"] else ""
        lines.append(f"    {r['slot_local']}  {r['current_label']} -> {r['edited_label']}{why}")
    lines.append("  " + _("future: %(summary)s") % {"summary": data["future"]["summary"]})
    for f in data["future"]["rows"]:
        lines.append(f"    {f['local']}  {f['current'] or '-'} -> {f['edited'] or '-'}  {f['note']}".rstrip())
    return "\n".join(lines)
