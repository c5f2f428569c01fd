# ruff: noqa: RUF003  (Chinese text uses full-width punctuation)
"""Is this zh-Hans text complete? A checker for rendered pages (HTML or the browser's visible text)
and alert texts: it fails on English words and on raw codes or Python literals shown to a reader.

Allowed: the words docs/glossary.md keeps in English (KEEP), numbers and units, zone names
(Asia/Shanghai), URLs and other identifiers (anything with . / : = { } @ or a digit), and every word of
every string stored in our tables (`data_words()`: rule names, keys, errors the data carries, what an
operator typed). Not allowed: any other ASCII word, a snake_case code (final_failure) that is not
data, and True / False / None.

The shared browser (tests/support/desk.py, `desk_browser`) applies it to every page a zh-Hans
browser test visits; tests/site/test_zh_hans_complete.py to every admin page; alert tests to alerts.
"""

import re
from html.parser import HTMLParser

from django.apps import apps
from django.db import models

# Kept as they are in Chinese too (docs/glossary.md, "kept in English").
KEEP = {
    "UTC",
    "CST",
    "CET",
    "JSON",
    "cron",
    "Cron",
    "IANA",
    "DST",
    "URL",
    "API",
    "HTTP",
    "HTTPS",
    "ID",
    "id",
    "HMAC",
    "SHA",
    "p50",
    "p95",
    "p99",
    "biz_key",
    # Field names an operator reads in an alert's payload and writes in a key or pool template.
    *("run_id", "error_kind", "ticket_id", "business_date", "triggered_by", "object_key", "link"),
    "Agent",
    "Harness",
    "Slack",
    "Feishu",
    "Lark",
    "DingTalk",
    "Python",
    "Celery",
    # Queue and pool names an operator types on a worker's command line (-Q agents, --pool prefork).
    *("celery", "agents", "harness_control", "prefork", "threads"),
    "OpenAI",
    "echo",
    "llm_json",
    "webhook",
    "Webhook",
    "SQLite",
    "PostgreSQL",
    "Redis",
    "ADMINS",
    "TRIAL",
    "ms",
    "s",
    "h",
    "min",
    "v",
    "x",
    "OK",
    "ok",
    "fence",
    "Standard",
    "Webhooks",
    "Django",
    "Axes",
    "axes",
    "SMTP",
    *("mon", "tue", "wed", "thu", "fri", "sat", "sun", "mon-fri", "Control", "Command", "Mac"),
    *("YYYY-MM-DD", "Schema", "POST", "GET", "ISO", "TTL", "Worker", "fencing", "amount"),
    # Error kinds are codes on-call searches for (the others carry an underscore, so read as identifiers).
    "timeout",
    *("webhook-id", "webhook-timestamp", "webhook-signature"),
    "GMT",
    "CEST",
    "EST",
    "EDT",
    "PST",
    "PDT",
    "JST",
    "KST",
    "HKT",
    "IST",
    "BST",
}
WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019-]*[A-Za-z]|[A-Za-z]")
IDENTIFIER = re.compile(r"[_./:={}\d@#<>%$\\|*]")
SKIP_TAGS = {"script", "style", "code", "pre", "textarea", "noscript", "svg", "symbol", "path"}


class _Text(HTMLParser):
    """The page's visible text and button labels, outside code, scripts and the user's typed values."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.skip = 0
        self.chunks: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in SKIP_TAGS:
            self.skip += 1
        a = dict(attrs)
        if tag == "input" and a.get("type") in ("submit", "button") and a.get("value"):
            self.chunks.append(a["value"])
        for name in ("title", "placeholder", "aria-label"):
            if a.get(name) and not self.skip:
                self.chunks.append(a[name])

    def handle_endtag(self, tag):
        if tag in SKIP_TAGS and self.skip:
            self.skip -= 1

    def handle_data(self, data):
        if not self.skip and data.strip():
            self.chunks.append(data.strip())


def data_words() -> set[str]:
    """Every word of every string stored in our tables: data, not UI. The alert outbox is not data:
    its rows hold our own (English, for the log) titles, which must not excuse English on a page."""
    words: set[str] = set()
    for model in apps.get_models():
        if model._meta.app_label not in {"tasks", "runs", "deadletters", "audit", "auth"}:
            continue
        if model._meta.label == "deadletters.Alert":
            continue
        fields = [
            f.name
            for f in model._meta.concrete_fields
            if isinstance(f, (models.CharField, models.TextField, models.JSONField))
        ]
        for row in model._default_manager.values_list(*fields) if fields else ():
            for value in row:
                words.update(WORD.findall(str(value)))
                words.update(str(value).split())  # whole tokens: an error kind such as not_ready_expired
    return words


def english_in(html: str, allowed: set[str]) -> list[str]:
    parser = _Text()
    parser.feed(html)
    found = []
    for chunk in parser.chunks:
        words = english_words(chunk, allowed)
        if words:
            found.append(f"{chunk[:120]!r} -> {words[:6]}")
    return found


LITERALS = {"True", "False", "None"}
QUOTED = re.compile(r"[\"'\[\]{}`]")  # a code quoted, in JSON or in braces is shown as code: fine
ASCII_RUN = re.compile(r"[\x21-\x7e]+")
# Around a word: ASCII and CJK punctuation (quotes, full-width brackets, colon, commas).
PUNCTUATION = ".,;:!?()[]{}<>\"'" + "\u201c\u201d\u2018\u2019\uff08\uff09\uff1a\uff1b\uff0c\u3002\u3001"
CODE = re.compile(r"^[a-z]+(?:_[a-z]+)+$")


def english_words(text: str, allowed: set[str]) -> list[str]:
    """The English words, raw codes and Python literals in a plain text (innerText, an alert)."""
    found = []
    # An ASCII run is a token: Chinese text needs no spaces, so "筛选：final_failure" holds one.
    for token in ASCII_RUN.findall(text):
        bare = token.strip(PUNCTUATION)
        if bare in LITERALS:
            found.append(bare)
            continue
        if CODE.match(bare) and bare not in allowed and not QUOTED.search(token):
            found.append(bare)
            continue
        if IDENTIFIER.search(token):
            continue
        found += [w for w in WORD.findall(token) if w not in allowed and w.lower() not in allowed]
    return found


def assert_zh_complete(text: str, *, allowed: set[str] | None = None, where: str = "") -> None:
    """Fail, naming the words, when `text` (zh-Hans) shows English, a raw code or a Python literal."""
    words = english_words(text, KEEP | (allowed if allowed is not None else data_words()))
    assert not words, f"English or raw codes on a zh-Hans {where or 'text'}: {sorted(set(words))[:20]}"
