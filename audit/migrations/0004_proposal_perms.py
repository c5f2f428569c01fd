from django.db import migrations


def install(apps, schema_editor):
    from audit.roles import roles_install

    # Same groups again, now that runs.decide_actionproposal and runs.view_actionproposal exist:
    # 0002_roles ran before the model that declares them.
    roles_install(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_proposal_actions"),
        # Creates ActionProposal and its custom permission decide_actionproposal.
        ("runs", "0005_steps_calls_proposals"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
