"""The three desk roles as auth groups. Installed by a data migration; safe to run again."""

# Every role may look at everything on the desk.
VIEW = [
    "tasks.view_triggerrule",
    "tasks.view_historicaltriggerrule",
    "tasks.view_diagnosticrecord",
    "runs.view_taskrun",
    "runs.view_runlease",
    "runs.view_attempt",
    "runs.view_lease",
    "runs.view_decision",
    "runs.view_schedulertick",
    "runs.view_actionproposal",
    "deadletters.view_deadletter",
    "audit.view_auditentry",
]
GROUPS = {
    "Viewers": VIEW,
    "Operators": [
        *VIEW,
        "tasks.add_triggerrule",
        "tasks.change_triggerrule",
        "tasks.run_rule_now",
        "tasks.trial_run_rule",
        "tasks.pause_rule",
        "tasks.backfill_rule",
        "runs.retry_run",
        "runs.cancel_run",
        # Approve or reject a risky action a skill proposed (runs/approvals.py).
        "runs.decide_actionproposal",
    ],
    "On-call": [
        *VIEW,
        "deadletters.replay_deadletter",
        "deadletters.close_deadletter",
        "deadletters.assign_deadletter",
        "runs.force_release_lease",
        "runs.retry_run",
        "runs.cancel_run",
        "runs.decide_actionproposal",
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
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = []
        for dotted in codenames:
            app_label, codename = dotted.split(".")
            found = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if found is None and strict:
                raise Permission.DoesNotExist(f"role {name!r}: permission {dotted!r} does not exist")
            if found is not None:
                perms.append(found)
        group.permissions.set(perms)
