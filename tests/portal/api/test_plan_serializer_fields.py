"""The plan serializer's load-profile parameters (Plan.PROFILE_INPUTS) are fields of their column's type,
right after ``profile_kind`` (the schema's order), added by plain code (``get_fields``)."""

from rest_framework import serializers

from portal.projects.api.serializers import PLAN_FIELDS, PlanSerializer
from portal.projects.models import Plan


def test_each_profile_parameter_is_a_field_of_its_columns_type_after_the_kind():
    fields = PlanSerializer().fields
    names = list(fields)
    at = names.index("profile_kind") + 1
    assert names[at : at + len(Plan.PROFILE_INPUTS)] == list(Plan.PROFILE_INPUTS)
    for name in Plan.PROFILE_INPUTS:
        integer = Plan._meta.get_field(name).get_internal_type() == "PositiveIntegerField"
        assert type(fields[name]) is (serializers.IntegerField if integer else serializers.FloatField), name
        assert not fields[name].required and fields[name].allow_null
    assert set(PLAN_FIELDS) <= set(names)
