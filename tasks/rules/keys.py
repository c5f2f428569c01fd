"""Business keys: render a rule's dedupe-key template. Pure: no ORM, no clock."""

from string import Formatter

BUILTIN_PLACEHOLDERS = ("rule", "slot", "business_date")
MAX_KEY_LENGTH = 255


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


def validate_template(template: str, *, params: dict) -> None:
    """Every placeholder must be a built-in or a key of the rule's params; the key must vary per slot or object."""
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


def render(template: str, *, rule: str, slot: str, business_date: str, params: dict) -> str:
    """The biz_key for one unit of work. Params first, so the built-ins cannot be overridden."""
    values = {k: v for k, v in params.items() if isinstance(k, str)}
    values.update(rule=rule, slot=slot, business_date=business_date)
    # The same checks as validate_template, for rules saved without it: "{rule.upper}" would render
    # a repr with a memory address (a different key in every process), "{slot[99]}" would crash the tick.
    for name in placeholders(template):
        if name not in values:
            raise KeyTemplateError(f"Unknown placeholder {{{name}}}.")
    key = template.format_map(values)
    if len(key) > MAX_KEY_LENGTH:
        raise KeyTemplateError(f"Rendered key is {len(key)} characters; the limit is {MAX_KEY_LENGTH}.")
    return key
