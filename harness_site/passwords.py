"""Password rules of our own, beside Django's: what its validators let through but a guesser tries first."""

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

# Words a guesser aiming at this site tries first: its own name and its default user.
SITE_WORDS = ("harness", "admin")
MIN_DISTINCT_CHARACTERS = 6


class GuessableValidator:
    """Refuses a password built on the site's own words, or on a few characters repeated."""

    def validate(self, password: str, user=None) -> None:
        lowered = password.lower()
        for word in SITE_WORDS:
            if word in lowered:
                raise ValidationError(
                    _("This password contains the word “%(word)s”, which guessers try first on this site.")
                    % {"word": word},
                    code="password_site_word",
                )
        if len(set(password)) < MIN_DISTINCT_CHARACTERS:
            raise ValidationError(
                _("This password repeats too few characters: use at least %(count)d different ones.")
                % {"count": MIN_DISTINCT_CHARACTERS},
                code="password_too_repetitive",
            )

    def get_help_text(self) -> str:
        return _(
            "Your password cannot contain “harness” or “admin”, and needs at least %(count)d different characters."
        ) % {"count": MIN_DISTINCT_CHARACTERS}
