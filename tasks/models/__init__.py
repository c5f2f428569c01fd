"""The definitions app's models, one module per concern; imported from here."""

from tasks.models.access import ApiToken, ServiceIdentity
from tasks.models.agent import Agent
from tasks.models.calendar import BusinessCalendar, CalendarOverride, NoticeDay
from tasks.models.diagnostic import DiagnosticRecord
from tasks.models.event import EventDelivery, EventMetric, EventRefusal, RefusalCount, TriggerSource
from tasks.models.flag import ReadinessFlag
from tasks.models.pool import GLOBAL_POOL, Pool
from tasks.models.rule import TriggerRule

__all__ = [
    "GLOBAL_POOL",
    "Agent",
    "ApiToken",
    "BusinessCalendar",
    "CalendarOverride",
    "DiagnosticRecord",
    "EventDelivery",
    "EventMetric",
    "EventRefusal",
    "NoticeDay",
    "Pool",
    "ReadinessFlag",
    "RefusalCount",
    "ServiceIdentity",
    "TriggerRule",
    "TriggerSource",
]
