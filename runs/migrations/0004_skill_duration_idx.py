from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0003_trial_lease_perms"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="taskrun",
            index=models.Index(
                condition=models.Q(("state", "succeeded")), fields=["skill", "-finish_at"], name="run_skill_done_idx"
            ),
        ),
    ]
