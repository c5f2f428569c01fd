"""Business keys: render a rule's dedupe-key template into a scoped, unambiguous biz_key. Pure.

A stored biz_key is `rule/<rule id>/<kind>/<rendered template>` (invariant 1):

- the namespace is the rule's id, not its name: the id never changes, so renaming a rule keeps
  deduping the slots it already ran, and two rules can never meet on one key whatever their
  templates say. (Runs do not travel with an export, so an imported rule's new id loses nothing.)
- the kind says which trigger made the work (SLOT for the scheduler, catch-up, heartbeats and
  backfill, EVENT, MANUAL for run now, TRIAL, and *_KEY for an operator-named key), so a sender,
  an operator and the scheduler can never take each other's runs.
- every value an operator or sender controls is percent-encoded (ESCAPED characters and `%`), so
  `a:b` + `c` and `a` + `b:c` render different keys; the built-ins are harness-made tokens (a slug,
  an ISO date or instant) and are written as they are, which keeps keys of runs stored before the
  namespace (upgraded by migration runs 0003) identical to today's.
"""

import string
from datetime import date
from string import Formatter
from typing import Any
from urllib.parse import unquote

from tasks.rules import business_days

# The business-day placeholders: the slot's local date, and its neighbours among the business days
# of the rule's calendar (Monday to Friday without one), e.g. "yesterday's data" on a Monday.
BUSINESS_DATE_PLACEHOLDERS = ("business_date", "previous_business_date", "next_business_date")
BUILTIN_PLACEHOLDERS = ("rule", "slot", *BUSINESS_DATE_PLACEHOLDERS)
# Placeholders whose value depends on when a trigger arrived rather than on what it names.
TIME_PLACEHOLDERS = frozenset({"slot", *BUSINESS_DATE_PLACEHOLDERS})
MAX_KEY_LENGTH = 255  # the whole stored key, namespace included (TaskRun.biz_key's column)

NAMESPACE_ROOT = "rule"
SLOT = "slot"
EVENT = "event"
MANUAL = "manual"
MANUAL_KEY = "manual-key"
TRIAL = "trial"
TRIAL_KEY = "trial-key"
# A delayed one-time run's idempotency key (POST /api/v1/runs, tasks.triggers.once.schedule_once).
ONCE_KEY = "once-key"
KINDS = (SLOT, EVENT, MANUAL, MANUAL_KEY, TRIAL, TRIAL_KEY, ONCE_KEY)
# A delayed run of a bare skill has no rule: its keys live under the skill's name instead.
SKILL_ROOT = "skill"

# Percent-encoded in values: `%` itself, every ASCII punctuation but `-_.~`, whitespace and control
# characters. Any of them but `%` may therefore separate two placeholders in a template: an escaped
# value holds `%` (in its %HH sequences), so `{a}%{b}` could still render two inputs as one key.
ESCAPED = frozenset(
    set(string.punctuation) - set("-_.~") | set(string.whitespace) | {chr(c) for c in range(32)} | {"\x7f"}
)
SEPARATORS = ESCAPED - {"%"}


class KeyTemplateError(ValueError):
    pass


def placeholders(template: str) -> list[str]:
    """Names used in a template; raises KeyTemplateError on malformed braces or field expressions."""
    try:
        parsed = list(Formatter().parse(template))
    except ValueError as exc:
        raise KeyTemplateError(f"Malformed template {template!r}: {exc}.") from exc
    names = []
    for _literal, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise KeyTemplateError(f"Placeholder {{{field}}} must be a plain name such as {{business_date}}.")
        names.append(field)
    return names


def validate_template(template: str, *, params: dict[str, Any]) -> None:
    """Every placeholder must be a built-in or a key of the rule's params; the key must vary per slot
    or object; two placeholders must be separated by an escaped character, or `{a}{b}` would give
    ("x", "yz") and ("xy", "z") one key."""
    if not template.strip():
        raise KeyTemplateError("The dedupe-key template is required, e.g. {rule}:{business_date}.")
    names = placeholders(template)
    allowed = set(BUILTIN_PLACEHOLDERS) | set(params)
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise KeyTemplateError(
            f"Unknown placeholder {{{unknown[0]}}}. Allowed: " + ", ".join("{" + n + "}" for n in sorted(allowed)) + "."
        )
    if not names:
        raise KeyTemplateError("The template has no placeholder, so every slot would share one key.")
    check_separated(template)


def escape(value: object) -> str:
    """`value` as text with every ESCAPED character and `%` percent-encoded (UTF-8): injective, and
    the result contains no separator, so a value can never end early or run into its neighbour."""
    return "".join("".join(f"%{b:02X}" for b in ch.encode()) if ch in ESCAPED else ch for ch in str(value))


def namespace(rule_id: object, kind: str) -> str:
    """The prefix every biz_key of one rule and trigger kind starts with."""
    if kind not in KINDS:
        raise ValueError(f"unknown key kind {kind!r}")
    return f"{NAMESPACE_ROOT}/{rule_id}/{kind}/"


def scoped(rule_id: int, kind: str, rendered: str) -> str:
    """The stored biz_key: the rule's namespace and the rendered template (or an escaped named key)."""
    key = namespace(rule_id, kind) + rendered
    if len(key) > MAX_KEY_LENGTH:
        raise KeyTemplateError(
            f"The business key is {len(key)} characters with its namespace; the limit is {MAX_KEY_LENGTH}."
        )
    return key


def skill_scoped(skill: str, kind: str, rendered: str) -> str:
    """The stored biz_key of a run with no rule: `skill/<escaped skill>/<kind>/<rendered>`. Outside
    every rule's namespace (in_namespace), so such a run can never take, or be taken by, a rule's."""
    if kind not in KINDS:
        raise ValueError(f"unknown key kind {kind!r}")
    key = f"{SKILL_ROOT}/{escape(skill)}/{kind}/{rendered}"
    if len(key) > MAX_KEY_LENGTH:
        raise KeyTemplateError(
            f"The business key is {len(key)} characters with its namespace; the limit is {MAX_KEY_LENGTH}."
        )
    return key


def in_namespace(biz_key: str, rule_id: int | None) -> bool:
    """Whether `biz_key` may be claimed for `rule_id`: a rule's keys start with one of its namespaces;
    a run without a rule (API, tests) may use no rule namespace at all."""
    if rule_id is None:
        return not biz_key.startswith(NAMESPACE_ROOT + "/")
    return any(biz_key.startswith(namespace(rule_id, kind)) for kind in KINDS)


def render(
    template: str,
    *,
    rule: str,
    slot: str,
    business_date: str,
    params: dict[str, Any],
    escaped: bool = False,
    source: str | None = None,
    previous_business_date: str | None = None,
    next_business_date: str | None = None,
) -> str:
    """A template rendered for one unit of work. Params first, so the built-ins cannot be overridden.

    `escaped`: percent-encode every param (what a biz_key needs); the built-ins (`source` too, for an
    event) are the harness's own tokens and are written as they are. Object keys and flag scopes are
    rendered unescaped, since producers name the scopes they set.
    """
    values = {k: (escape(v) if escaped else v) for k, v in params.items() if isinstance(k, str)}
    values.update(rule=rule, slot=slot, business_date=business_date)
    if previous_business_date is None or next_business_date is None:
        values.update(_weekday_neighbours(business_date))
    else:
        values.update(previous_business_date=previous_business_date, next_business_date=next_business_date)
    if source is not None:
        values["source"] = source
    # The same checks as validate_template, for rules saved without it: "{rule.upper}" would render
    # a repr with a memory address (a different key in every process), "{slot[99]}" would crash the tick.
    for name in placeholders(template):
        if name not in values:
            raise KeyTemplateError(f"Unknown placeholder {{{name}}}.")
    key = template.format_map(values)
    if len(key) > MAX_KEY_LENGTH:
        raise KeyTemplateError(f"Rendered key is {len(key)} characters; the limit is {MAX_KEY_LENGTH}.")
    return key


def _weekday_neighbours(business_date: str) -> dict[str, str]:
    """Without a calendar's answer: the neighbouring weekdays (blank when there is no date)."""
    try:
        day = date.fromisoformat(business_date)
    except ValueError:
        return {"previous_business_date": "", "next_business_date": ""}
    dates = business_days.business_dates(None, day)
    return {k: dates[k] for k in ("previous_business_date", "next_business_date")}


def check_separated(template: str) -> None:
    """Refuse two placeholders with no escaped character between them."""
    seen_field = False
    for literal, field, _spec, _conversion in Formatter().parse(template):
        if field is None:
            continue
        if seen_field and not any(ch in SEPARATORS for ch in literal):
            raise KeyTemplateError(
                f"Separate {{{field}}} from the placeholder before it with a character such as ':' or '/' "
                f"(found {literal!r}), or two different inputs could render one key."
            )
        seen_field = True


LEGACY_TRIAL_PREFIX = "trial:"  # trial keys before the namespaces


def legacy_upgrade(old_key: str, *, rule_id: int | None, source: str, is_trial: bool) -> str | None:
    """The scoped key for a run stored before the namespaces (data migration runs 0003), or None to
    keep the row's key as it is.

    The rendered part is kept verbatim, which is exactly what today's rendering gives for values
    without ESCAPED characters, so those rows keep deduping the same slots and events. Old manual
    runs held their minute's slot key, so they stay in SLOT and keep holding it. None: no rule (its
    keys are outside every namespace), already scoped, or too long with the prefix (then the same
    slot cannot render a key any more either, so nothing can run twice).
    """
    if rule_id is None or in_namespace(old_key, rule_id):
        return None
    if is_trial:
        kind, rendered = TRIAL, old_key.removeprefix(LEGACY_TRIAL_PREFIX)
    else:
        kind, rendered = (EVENT if source == "event" else SLOT), old_key
    key = namespace(rule_id, kind) + rendered
    return key if len(key) <= MAX_KEY_LENGTH else None


def legacy_downgrade(key: str, *, rule_id: int | None) -> str | None:
    """The pre-namespace key of a scoped one (the migration's reverse), or None if not scoped."""
    if rule_id is None:
        return None
    for kind in KINDS:
        prefix = namespace(rule_id, kind)
        if key.startswith(prefix):
            rendered = key.removeprefix(prefix)
            return LEGACY_TRIAL_PREFIX + rendered if kind in (TRIAL, TRIAL_KEY) else rendered
    return None


# Keys for people: what a list shows, what a search tries. A stored key is an identifier; a person
# reads the part that differs between two runs of one rule (the slot or the object), unescaped.


def unescape(text: str) -> str:
    """A key as a person reads it: every %HH sequence of `escape` decoded (`callback%3Aorder-7` reads
    `callback:order-7`). Display only: a decoded key may look like another one, never use it as a key."""
    if "%" not in text:
        return text
    try:
        return unquote(text, errors="strict")
    except UnicodeDecodeError:  # not one of ours (a key stored before escaping): shown as stored
        return text


def split(biz_key: str) -> tuple[str, str]:
    """(namespace, rendered part) of a stored key: `rule/5/slot/` and the rest; ("", key) for a key
    outside every namespace (a run without a rule, a key stored before the namespaces)."""
    parts = biz_key.split("/", 3)
    if len(parts) == 4 and parts[0] in (NAMESPACE_ROOT, SKILL_ROOT) and parts[2] in KINDS:
        return "/".join(parts[:3]) + "/", parts[3]
    return "", biz_key


def kind_of(biz_key: str) -> str:
    """The trigger kind named in a stored key's namespace (SLOT, EVENT…), "" when it has none."""
    prefix, _rest = split(biz_key)
    return prefix.split("/")[2] if prefix else ""


def differing_part(biz_key: str, *, rule_name: str = "") -> str:
    """The part of a stored key that tells two runs of one rule apart, unescaped: without its
    namespace, and without the rule's name when the template starts with it (`{rule}:{slot}` shows
    the slot). The whole key when nothing would be left."""
    _prefix, rest = split(biz_key)
    if rule_name and rest.startswith(rule_name) and rest[len(rule_name) : len(rule_name) + 1] in SEPARATORS:
        rest = rest[len(rule_name) + 1 :]
    return unescape(rest) if rest else unescape(biz_key)


def search_candidates(raw: str) -> list[str]:
    """Stored keys a person may mean by `raw`, the text a client sent or a key pasted from a list:
    the text as it is, the text escaped as a named key is stored (`callback:order-7` is kept as
    `callback%3Aorder-7`), and a pasted namespaced key with its rendered part escaped. Duplicates
    removed, order kept (the first is the text itself)."""
    text = raw.strip()
    if not text:
        return []
    candidates = [text, escape(text)]
    prefix, rest = split(text)
    if prefix:
        candidates.append(prefix + escape(rest))
    return list(dict.fromkeys(candidates))
