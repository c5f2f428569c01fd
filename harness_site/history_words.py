"""A version history's changed values as people read them (django-simple-history's list): a choice
by its label in the reader's language, yes / no for a boolean, "—" for nothing; never the stored
code (`wall`) nor Python's True / False / None, which the library shows by default."""

from typing import TYPE_CHECKING, Any

from simple_history.template_utils import HistoricalRecordContextHelper

from harness_site.templatetags.harness import shown_value


class ReadableHistory(HistoricalRecordContextHelper):
    def prepare_delta_change_value(self, change, value):
        value = super().prepare_delta_change_value(change, value)
        field = self.model._meta.get_field(change.field)
        if field.choices and not isinstance(value, list | dict):
            value = dict(field.flatchoices).get(value, value)
        return shown_value(value)


if TYPE_CHECKING:
    from django.contrib import admin

    _Admin = admin.ModelAdmin[Any]  # SimpleHistoryAdmin, which ships no types
else:
    _Admin = object


class ReadableHistoryMixin(_Admin):
    """For a SimpleHistoryAdmin: its History page words each change with ReadableHistory."""

    def get_historical_record_context_helper(self, request, historical_record):
        return ReadableHistory(self.model, historical_record)
