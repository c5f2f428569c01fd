"""The three desk roles as auth groups. Installed by a data migration; safe to run again."""

# Every role may look at everything on the desk. API tokens are left out on purpose: even their
# hashes and owners are for administrators.
VIEW = [
    *(
        f"tasks.view_{m}"
        for m in (
            "triggerrule",
            "historicaltriggerrule",
            "diagnosticrecord",
            "agent",
            "pool",
            "historicalpool",
            "businesscalendar",
            "calendaroverride",
            "readinessflag",
            "serviceidentity",
            "triggersource",
            "eventdelivery",
            "eventrefusal",
            "eventmetric",
        )
    ),
    *(
        f"runs.view_{m}"
        for m in (
            "taskrun",
            "runlease",
            "attempt",
            "lease",
            "decision",
            "slothold",
            "slotobjective",
            "incident",
            "schedulertick",
            "runstep",
            "externalcall",
            "actionproposal",
            "backpressure",
        )
    ),
    "deadletters.view_deadletter",
    "deadletters.view_alertchannel",
    "deadletters.view_alert",
    "audit.view_auditentry",
]
# Readiness flags are set and cleared by operators and on-call alike (a late upstream at 3 a.m.).
FLAGS = ["tasks.add_readinessflag", "tasks.change_readinessflag", "tasks.delete_readinessflag", "tasks.send_ping"]
GROUPS = {
    "Viewers": VIEW,
    "Operators": [
        *VIEW,
        *FLAGS,
        "tasks.add_triggerrule",
        "tasks.change_triggerrule",
        "tasks.run_rule_now",
        "tasks.trial_run_rule",
        "tasks.pause_rule",
        "tasks.backfill_rule",
        "runs.rerun_slots",
        "tasks.add_agent",
        "tasks.change_agent",
        # Flow control: operators tune limits at runtime, without a deploy.
        "tasks.add_pool",
        "tasks.change_pool",
        # Business calendars: a company's shutdown days and extra working days are operators' data.
        "tasks.add_businesscalendar",
        "tasks.change_businesscalendar",
        "tasks.add_calendaroverride",
        "tasks.change_calendaroverride",
        "tasks.delete_calendaroverride",
        "runs.add_backpressure",
        "runs.change_backpressure",
        "tasks.add_triggersource",
        "tasks.change_triggersource",
        "runs.retry_run",
        "runs.cancel_run",
        # Catch-up runs held above the rule's approval threshold (runs/engine/approvals.py).
        "runs.approve_catchup",
        # Approve or reject a risky action a skill proposed (runs/engine/approvals.py).
        "runs.decide_actionproposal",
        "runs.acknowledge_slotobjective",
    ],
    "On-call": [
        *VIEW,
        *FLAGS,
        "deadletters.replay_deadletter",
        "deadletters.close_deadletter",
        "deadletters.assign_deadletter",
        "runs.force_release_lease",
        "runs.retry_run",
        "runs.cancel_run",
        "runs.decide_actionproposal",
        "deadletters.change_alertchannel",
        # On-call has it in hand: no more objective alerts for those slots.
        "runs.acknowledge_slotobjective",
        # After an outage on-call re-runs the chosen missed slots (tasks/triggers/rerun.py).
        "runs.rerun_slots",
    ],
}


def roles_install(apps) -> None:
    """Create the groups and (re)set their permissions; `apps` is the migration's app registry."""
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after migrate; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    # A data migration sees the models as they were at its point in the history: permissions of
    # models created by later migrations do not exist yet; a later roles migration adds them.
    _groups_install(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"), strict=False)


def roles_ensure() -> None:
    """The same groups with the real models, once permissions exist (tests that flush the database
    re-create permissions through post_migrate, but not the migration's groups)."""
    from django.contrib.auth.models import Group, Permission

    _groups_install(Group, Permission)


def _groups_install(Group, Permission, *, strict: bool = True) -> None:
    # Every permission the roles name, in one query (the tests make role users by the thousand).
    wanted = {_pair(dotted) for codenames in GROUPS.values() for dotted in codenames}
    found = {
        (p.content_type.app_label, p.codename): p
        for p in Permission.objects.select_related("content_type").filter(
            content_type__app_label__in={app for app, _ in wanted}, codename__in={code for _, code in wanted}
        )
    }
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = []
        for dotted in codenames:
            perm = found.get(_pair(dotted))
            if perm is None and strict:
                raise Permission.DoesNotExist(f"role {name!r}: permission {dotted!r} does not exist")
            if perm is not None:
                perms.append(perm)
        group.permissions.set(perms)


def _pair(dotted: str) -> tuple[str, str]:
    app_label, codename = dotted.split(".")
    return app_label, codename
