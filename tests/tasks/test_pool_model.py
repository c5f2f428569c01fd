"""Pools (issue 11): the global pool always exists, cannot be deleted, and limits are validated."""

import pytest
from django.core.exceptions import ValidationError

from tasks.models import GLOBAL_POOL, Pool

pytestmark = pytest.mark.django_db


def test_the_global_pool_is_installed_and_cannot_be_deleted():
    pool = Pool.objects.get(name=GLOBAL_POOL)
    assert pool.max_concurrency is None
    with pytest.raises(ValidationError):
        pool.delete()
    assert Pool.objects.filter(name=GLOBAL_POOL).exists()


def test_a_key_template_may_use_only_what_a_run_carries():
    pool = Pool(name="p", reason="r", max_concurrency=1, key_template="{tenant_id}")
    with pytest.raises(ValidationError) as exc:
        pool.full_clean()
    assert "key_template" in exc.value.message_dict
    Pool(name="p", reason="r", max_concurrency=1, key_template="{object_key}:{source}").full_clean()


def test_a_rate_needs_its_period():
    with pytest.raises(ValidationError) as exc:
        Pool(name="p", reason="r", rate_count=10).full_clean()
    assert "rate_period_seconds" in exc.value.message_dict
