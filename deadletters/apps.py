from django.apps import AppConfig


class DeadlettersConfig(AppConfig):
    name = "deadletters"
    verbose_name = "Dead letters"
