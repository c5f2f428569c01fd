from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DeadlettersConfig(AppConfig):
    name = "deadletters"
    verbose_name = _("Dead letters")
