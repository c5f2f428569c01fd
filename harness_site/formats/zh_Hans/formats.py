"""Every date and time the admin prints says its zone and, for a time, the second.
`T` is the active zone's abbreviation: UTC unless the operator chose another display zone."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
