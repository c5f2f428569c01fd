"""Operator commands: `manage.py harness rules import|export`, `notice import`, `runs`, `records`, `fire`, `backfill`,
`demo`."""

import getpass
import json
import secrets
import sys
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from runs.desk.selectors import run_list_recent
from tasks import services
from tasks.management.subcommands import GuardCommandsMixin, add_guard_parsers, rules_plan_print
from tasks.models import DiagnosticRecord, TriggerRule, TriggerSource
from tasks.notices import NoticeError, notice_import
from tasks.triggers import rerun
from tasks.triggers.explain import SlotParseError, parse_slot
from tasks.triggers.operator import RuleActionError, rule_fire
from tasks.triggers.sensors import sensor_scan, sensors_scan_all

DEMO_RULES = Path(__file__).resolve().parents[2] / "fixtures" / "demo_rules.json"


class Command(GuardCommandsMixin, BaseCommand):
    help = "Agent Harness operator commands."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        rules = sub.add_parser("rules", help="import or export trigger rules as JSON")
        rules_sub = rules.add_subparsers(dest="rules_command", required=True)
        imp = rules_sub.add_parser(
            "import",
            help="plan, then upsert rules by name from FILE ('-' for stdin); all or nothing, audited",
        )
        imp.add_argument("file")
        imp.add_argument("--reason", default="", help="why (kept in the audit log with who imported)")
        imp.add_argument("--by", default="", help="who imports (default: the operating-system user)")
        imp.add_argument("--allow", action="store_true", help="apply even with a dangerous consequence")
        plan = rules_sub.add_parser(
            "plan",
            help="what importing FILE would change, would have done and will do; exits 1 on a dangerous "
            "consequence unless --allow",
        )
        plan.add_argument("file")
        plan.add_argument("--days", type=int, default=14, help="days replayed and previewed (1 to 60)")
        plan.add_argument("--allow", action="store_true", help="exit 0 even with a dangerous consequence")
        plan.add_argument("--json", action="store_true", dest="as_json")
        exp = rules_sub.add_parser("export", help="write all rules as JSON")
        exp.add_argument("--output", "-o", default="-")

        runs = sub.add_parser("runs", help="recent runs")
        runs.add_argument("--json", action="store_true", dest="as_json")
        runs.add_argument("--limit", type=int, default=50)
        runs.add_argument("--rule")

        records = sub.add_parser("records", help="rows written by the harness.record skill")
        records.add_argument("--json", action="store_true", dest="as_json")
        records.add_argument("--rule")

        fire = sub.add_parser("fire", help="trigger RULE now (manual, deduped like any other trigger)")
        fire.add_argument("rule")
        fire.add_argument("--slot", help="ISO 8601 instant with offset; default: now cut to the minute")
        fire.add_argument("--actor", default="cli")

        backfill = sub.add_parser(
            "backfill",
            help="re-run chosen slots of RULE (missed ones): prints the plan; --yes claims exactly that plan",
        )
        backfill.add_argument("rule")
        backfill.add_argument(
            "--slots",
            nargs="+",
            required=True,
            help="ISO 8601 instants; without an offset read in the rule's timezone",
        )
        backfill.add_argument("--yes", action="store_true", help="claim the plan (default: show it only)")
        backfill.add_argument("--spacing", type=int, default=10, help="seconds between the runs' releases (0-3600)")
        backfill.add_argument("--reason", default="", help="why (kept in the audit log)")
        backfill.add_argument("--by", default="", help="who (default: the operating-system user)")

        sensors = sub.add_parser("sensors", help="file-arrival sensors (docs/events.md)")
        sensors_sub = sensors.add_subparsers(dest="sensors_command", required=True)
        scan = sensors_sub.add_parser("scan", help="scan the folders of enabled file sources once")
        scan.add_argument("--source", help="scan only this file source")

        notice = sub.add_parser("notice", help="a country's published holiday notice (docs/calendars.md)")
        notice_sub = notice.add_subparsers(dest="notice_command", required=True)
        notice_imp = notice_sub.add_parser("import", help="replace the country's days for the year with FILE's")
        notice_imp.add_argument("file")

        sub.add_parser("demo", help="install the demo rules (idempotent)")
        add_guard_parsers(sub)  # flags, explain, preview, ping, token (tasks/management/subcommands.py)
        sub.add_parser("admin-login", help="create the admin user on first use and print its login")

    def handle(self, *args, command, **opts):
        getattr(self, "_" + command.replace("-", "_"))(**opts)

    def _rules(self, *, rules_command, **opts):
        if rules_command == "import":
            # Bytes: the import says "not UTF-8" with the offset, instead of a UnicodeDecodeError.
            text = _stdin_bytes() if opts["file"] == "-" else _read(opts["file"])
            self._import(text, by=opts["by"] or _os_user(), reason=opts["reason"], allow=opts["allow"])
        elif rules_command == "plan":
            text = _stdin_bytes() if opts["file"] == "-" else _read(opts["file"])
            rules_plan_print(self, text, days=opts["days"], allow=opts["allow"], as_json=opts["as_json"])
        else:
            out = json.dumps(services.rule_export(), indent=2, cls=DjangoJSONEncoder)
            if opts["output"] == "-":
                self.stdout.write(out)
            else:
                Path(opts["output"]).write_text(out + "\n")

    def _notice(self, *, notice_command, file, **opts):
        text = _stdin_bytes() if file == "-" else _read(file)
        try:
            done = notice_import(text, now=timezone.now())
        except NoticeError as exc:
            raise CommandError("notice not imported, nothing was saved:\n  " + "\n  ".join(exc.errors)) from None
        self.stdout.write(
            f"{done['country']} {done['year']}: {done['days_off']} day(s) off, "
            f"{done['working_days']} make-up working day(s); every {done['country']} calendar reads them"
        )

    def _import(self, text: str | bytes, *, by: str, reason: str, allow: bool = False) -> None:
        try:
            result = services.rule_import(text, now=timezone.now(), actor=by, reason=reason, allow=allow)
        except services.RuleImportDangerous as exc:
            raise CommandError(
                "rules not applied, nothing was saved: the plan has dangerous consequences (see `harness rules "
                "plan FILE`; apply with --allow):\n  " + "\n  ".join(exc.errors)
            ) from None
        except services.RuleImportError as exc:
            raise CommandError("rules rejected, nothing was saved:\n  " + "\n  ".join(exc.errors)) from None
        self.stdout.write(
            f"created {len(result.created)}, updated {len(result.updated)}, unchanged {len(result.unchanged)}"
        )

    def _demo(self, **opts):
        self._import(DEMO_RULES.read_text(), by=_os_user(), reason="harness demo", allow=True)

    def _admin_login(self, **opts):
        secret = Path(settings.VAR_DIR) / "admin-password.txt"
        users = get_user_model().objects
        if not users.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            try:
                # create_superuser() takes any password; the site's rules apply to this one too.
                password_validation.validate_password(password, users.model(username="admin", email="admin@localhost"))
            except ValidationError as exc:
                raise CommandError(f"generated password refused: {' '.join(exc.messages)}") from None
            users.create_superuser("admin", "admin@localhost", password)
            secret.parent.mkdir(parents=True, exist_ok=True)
            secret.write_text(password + "\n")
            secret.chmod(0o600)
        if secret.exists():
            self.stdout.write(f"admin login: admin / {secret.read_text().strip()}  (stored in {secret})")
        else:
            self.stdout.write("admin user exists; set its password with: python manage.py changepassword admin")

    def _runs(self, *, as_json, limit, rule, **opts):
        rows = [
            {
                "id": r.id,
                "biz_key": r.biz_key,
                "rule": r.rule_name,
                "state": r.state,
                "source": r.source,
                "triggered_by": r.triggered_by,
                "slot": r.slot,
                "trigger_at": r.trigger_at,
                "start_at": r.start_at,
                "finish_at": r.finish_at,
                "attempts": r.attempts,
                "dedupe_hits": r.dedupe_hits,
                "last_error_kind": r.last_error_kind,
            }
            for r in run_list_recent(limit=limit, rule_name=rule)
        ]
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2, cls=DjangoJSONEncoder))
            return
        for r in rows:
            self.stdout.write(f"{r['id']:>7} {r['state']:<13} {r['attempts']:>2} {r['source']:<9} {r['biz_key']}")

    def _records(self, *, as_json, rule, **opts):
        qs = DiagnosticRecord.objects.order_by("id")
        if rule:
            qs = qs.filter(rule_name=rule)
        rows = list(
            qs.values("id", "run_id", "biz_key", "rule_name", "slot", "fence", "attempt", "worker", "created_at")
        )
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2, cls=DjangoJSONEncoder))
            return
        for r in rows:
            self.stdout.write(f"{r['id']:>7} run {r['run_id']:>7} fence {r['fence']:>3} {r['biz_key']}")

    def _fire(self, *, rule, slot, actor, **opts):
        try:
            obj = TriggerRule.objects.get(name=rule)
        except TriggerRule.DoesNotExist:
            raise CommandError(f"no rule named {rule!r}") from None
        at = None
        if slot:
            at = parse_datetime(slot)
            if at is None or at.tzinfo is None:
                raise CommandError(
                    f"--slot {slot!r}: give an ISO 8601 instant with offset, e.g. 2026-12-01T09:00:00+08:00"
                )
        claim = rule_fire(rule=obj, actor=actor, now=timezone.now(), slot=at)
        assert claim.run is not None  # never shed: work_for_operator skips intake flow control
        verb = "created" if claim.created else "already exists (dedupe hit counted)"
        self.stdout.write(f"run {claim.run.id} {verb}: {claim.run.biz_key}")

    def _backfill(self, *, rule, slots, yes, spacing, reason, by, **opts):
        obj = TriggerRule.objects.filter(name=rule).first()
        if obj is None:
            raise CommandError(f"no rule named {rule!r}")
        if not 0 <= spacing <= 3600:
            raise CommandError("--spacing: a whole number of seconds from 0 to 3600")
        try:
            chosen = [parse_slot(text, rule=obj) for text in slots]
        except SlotParseError as exc:
            raise CommandError(f"--slots: {exc}") from None
        now = timezone.now()
        gap = timedelta(seconds=spacing)
        try:
            plan = rerun.rule_slots_rerun_plan(rule=obj, slots=chosen, now=now, spacing=gap)
        except RuleActionError as exc:
            raise CommandError(str(exc)) from None
        for n, item in enumerate(plan.to_run):
            self.stdout.write(f"run     {_instant(item.slot)}  {item.biz_key}  due in {spacing * n} s")
        for item in plan.items:
            if item.refused:
                run = f" run {item.run_id} ({item.run_state})" if item.run_id else ""
                hint = "; replay it: the run's Retry now" if item.run_state == "failed" else ""
                self.stdout.write(f"refused {_instant(item.slot)}  {item.refused}{run}{hint}")
        if not yes:
            self.stdout.write(f"{len(plan.to_run)} slot(s) would run; nothing created. Add --yes to run them.")
            return
        try:
            done = rerun.slots_rerun(
                rule=obj,
                slots=chosen,
                confirmed=plan.signature,
                spacing=gap,
                actor=by or _os_user(),
                now=now,
                reason=reason,
            )
        except RuleActionError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{done['created']} run(s) created: {' '.join(map(str, done['runs']))}".rstrip())

    def _sensors(self, *, sensors_command, source, **opts):
        now = timezone.now()
        if source:
            obj = TriggerSource.objects.filter(name=source, kind=TriggerSource.Kind.FILE).first()
            if obj is None:
                raise CommandError(f"no file source named {source!r}")
            result = sensor_scan(source=obj, now=now)
        else:
            result = sensors_scan_all(now=now)
        self.stdout.write(
            f"{result.sources} source(s): {result.ready} complete file(s), {result.accepted} new run(s), "
            f"{result.known} already taken, {result.other} duplicate or refused"
        )
        for error in result.errors:
            self.stderr.write(error)


def _instant(at: datetime | None) -> str:
    return at.isoformat() if at is not None else "-"


def _stdin_bytes() -> bytes | str:
    buffer = getattr(sys.stdin, "buffer", None)
    return buffer.read() if buffer is not None else sys.stdin.read()


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None


def _os_user() -> str:
    """Who runs the command, for the audit log."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a bare container)
        return "cli"
