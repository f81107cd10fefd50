"""A test case's data set: CSV upload, its checks, the modes, replace and remove."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils.html import escape

from portal.projects.models import DataSet
from workers.engine.plan import Plan as EnginePlan

pytestmark = pytest.mark.django_db

USERS = b"username,password\nalice,a-pass\nbob,b-pass\n"


def _upload(client, test_case, content: bytes, *, name="users.csv", mode="sequential", **extra):
    return client.post(
        reverse("projects:data-set-upload", args=[test_case.code]),
        {"file": SimpleUploadedFile(name, content, content_type="text/csv"), "mode": mode},
        **extra,
    )


@pytest.fixture
def data_set(test_case):
    rows = [[f"user{i}", f"pass{i}"] for i in range(25)]
    return DataSet.objects.create(
        test_case=test_case, file_name="users.csv", columns=["username", "password"], rows=rows, row_count=25
    )


def test_test_case_without_a_data_set_explains_substitution(alice_client, test_case):
    # when
    page = alice_client.get(reverse("projects:testcase", args=[test_case.code])).content.decode()
    # then
    assert "<strong>No data set</strong>" in page
    assert "<code>{{username}}</code> in their path, headers or body" in page
    assert 'enctype="multipart/form-data"' in page


def test_upload_a_data_set(alice_client, test_case):
    # when
    response = _upload(alice_client, test_case, USERS, mode="random")
    # then
    assert response.status_code == 302
    assert response.url == test_case.get_absolute_url() + "#data-set"
    data_set = DataSet.objects.get(test_case=test_case)
    assert (data_set.file_name, data_set.columns, data_set.row_count, data_set.mode) == (
        "users.csv",
        ["username", "password"],
        2,
        "random",
    )
    assert data_set.rows == [["alice", "a-pass"], ["bob", "b-pass"]]


def test_csv_details_are_understood(alice_client, test_case):
    # given: a byte-order mark, CRLF line ends, quoted commas and line breaks, blank lines, padded header
    content = '\ufeff username , term\r\n"ann, jr","a ""b""\r\nc"\r\n\r\nzoë,ü\r\n'.encode()
    # when
    response = _upload(alice_client, test_case, content)
    # then
    assert response.status_code == 302
    data_set = DataSet.objects.get(test_case=test_case)
    assert data_set.columns == ["username", "term"]
    assert data_set.rows == [["ann, jr", 'a "b"\r\nc'], ["zoë", "ü"]]


def test_data_set_card_shows_columns_and_the_first_ten_rows(alice_client, test_case, data_set):
    # when
    response = alice_client.get(reverse("projects:testcase", args=[test_case.code]))
    # then
    page = response.content.decode()
    assert "<strong>users.csv</strong> · 25 rows" in page
    assert "<code>{{username}}</code>, <code>{{password}}</code>" in page
    assert "<code>user9</code>" in page
    assert "user10" not in page
    assert "The first 10 of 25 rows." in page
    assert response.context["data_set"].head == data_set.rows[:10]
    assert reverse("projects:data-set-delete", args=[test_case.code]) in page


def test_viewer_sees_the_data_set_but_cannot_change_it(bob_client, test_case, data_set):
    # when
    page = bob_client.get(reverse("projects:testcase", args=[test_case.code])).content.decode()
    # then
    assert "<strong>users.csv</strong>" in page
    assert reverse("projects:data-set-upload", args=[test_case.code]) not in page
    assert reverse("projects:data-set-delete", args=[test_case.code]) not in page


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "The file is empty: its first row names the columns, e.g. username,password"),
        (b"\n \n", "The file is empty: its first row names the columns, e.g. username,password"),
        (b"username,password\n", "The file names its columns but has no rows of values."),
        (
            b"username,password\n" + b"a,b\n" * 15 + b"a,b,c\nd\n",
            "row 17 has 3 values, the header has 2; row 18 has 1 value, the header has 2. "
            "Every row needs one value per column.",
        ),
        (
            b"user name,password\na,b\n",
            "The first row names the columns, as in {{username}}: column 1 “user name” is not a valid name "
            "(use letters, digits and _, not starting with a digit)",
        ),
        (b"username,,2fa\na,b,c\n", "column 2 has no name"),
        (b"username,2fa\na,b\n", "column 2 “2fa” is not a valid name"),
        (b"username,username\na,b\n", "column “username” appears twice"),
        (
            "username\nzoë\n".encode("latin-1"),
            "The file is not UTF-8 text (byte 0xeb at position 11). Save it as “CSV UTF-8” and upload it again.",
        ),
        (b'username\n"unclosed\n', "line 2 is not valid CSV: unexpected end of data"),
        (b'username\n"a"b\n', "line 2 is not valid CSV: ',' expected after '\"'"),
    ],
)
def test_bad_csv_is_refused_with_a_message(alice_client, test_case, content, message):
    # when
    response = _upload(alice_client, test_case, content)
    # then
    assert response.status_code == 200
    assert escape(message) in response.content.decode()
    assert not DataSet.objects.exists()


def test_many_ragged_rows_are_summed_up(alice_client, test_case):
    # when
    response = _upload(alice_client, test_case, b"a,b\n" + b"1\n" * 8)
    # then
    assert "row 6 has 1 value, the header has 2 (and 3 more rows like these)." in response.content.decode()


def test_at_most_100000_rows(alice_client, test_case):
    # given
    at_limit = b"n\n" + b"1\n" * 100_000
    # when
    refused = _upload(alice_client, test_case, at_limit + b"2\n")
    accepted = _upload(alice_client, test_case, at_limit)
    # then
    assert escape("The file has more than 100,000 rows; keep the rows you need and upload it again.") in (
        refused.content.decode()
    )
    assert accepted.status_code == 302
    assert DataSet.objects.get().row_count == 100_000


def test_at_most_5_mb(alice_client, test_case):
    # when
    response = _upload(alice_client, test_case, b"n\n" + b"x" * (6 * 1024 * 1024))
    # then
    assert "The file is 6.0 MB; the limit is 5 MB." in response.content.decode()
    assert not DataSet.objects.exists()


def test_upload_without_a_file(alice_client, test_case):
    # when
    response = alice_client.post(reverse("projects:data-set-upload", args=[test_case.code]), {"mode": "random"})
    # then
    assert response.status_code == 200
    assert "This field is required." in response.content.decode()


def test_replace_the_data_set(alice_client, test_case, data_set):
    # when
    response = _upload(alice_client, test_case, b"term\nreport\nbudget\n", name="terms.csv", mode="unique")
    # then
    assert response.status_code == 302
    replaced = DataSet.objects.get(test_case=test_case)
    assert replaced.pk == data_set.pk
    assert (replaced.file_name, replaced.columns, replaced.rows, replaced.row_count, replaced.mode) == (
        "terms.csv",
        ["term"],
        [["report"], ["budget"]],
        2,
        "unique",
    )


@pytest.mark.parametrize("mode", ["sequential", "random", "unique"])
def test_change_the_mode(alice_client, test_case, data_set, mode):
    # when
    response = alice_client.post(reverse("projects:data-set-mode", args=[test_case.code]), {"mode": mode})
    # then
    assert response.status_code == 302
    data_set.refresh_from_db()
    assert data_set.mode == mode
    assert data_set.row_count == len(data_set.rows) == 25


def test_unknown_mode_is_refused(alice_client, test_case, data_set):
    # when
    response = alice_client.post(
        reverse("projects:data-set-mode", args=[test_case.code]), {"mode": "shuffled"}, follow=True
    )
    # then
    assert "Mode not changed: Select a valid choice. shuffled is not one of the available choices." in (
        response.content.decode()
    )
    data_set.refresh_from_db()
    assert data_set.mode == "sequential"


def test_remove_the_data_set(alice_client, test_case, data_set):
    # given
    confirm = alice_client.get(reverse("projects:data-set-delete", args=[test_case.code])).content.decode()
    # when
    response = alice_client.post(reverse("projects:data-set-delete", args=[test_case.code]))
    # then
    assert "Delete the data set “users.csv”?" in confirm
    assert "its 25 rows" in confirm
    assert response.status_code == 302
    assert not DataSet.objects.exists()


def test_removing_a_data_set_that_steps_use_is_a_problem_for_the_plans(alice_client, test_case, data_set, plan):
    # given
    test_case.steps.filter(position=0).update(path="/login?u={{username}}")
    assert plan.problems() == []
    # when
    alice_client.post(reverse("projects:data-set-delete", args=[test_case.code]))
    # then
    assert plan.problems() == [
        "Step 1 “Home” of “Browse” uses {{username}}, which no earlier step extracts and no data-set column provides."
    ]


def test_mode_and_remove_need_a_data_set(alice_client, test_case):
    # when
    responses = [
        alice_client.post(reverse("projects:data-set-mode", args=[test_case.code]), {"mode": "random"}),
        alice_client.get(reverse("projects:data-set-delete", args=[test_case.code])),
    ]
    # then
    assert [r.status_code for r in responses] == [404, 404]


def test_data_set_goes_into_the_plan_only_when_there_is_one(plan, test_case, data_set):
    # when
    with_data = plan.to_engine_dict()["test_cases"][0]
    data_set.delete()
    without = plan.to_engine_dict()["test_cases"][0]
    # then
    assert with_data["data_set"] == {"columns": ["username", "password"], "rows": data_set.rows, "mode": "sequential"}
    assert "data_set" not in without


@pytest.mark.parametrize("mode", ["sequential", "random", "unique"])
def test_engine_accepts_each_mode(plan, data_set, mode):
    # given
    data_set.mode = mode
    data_set.save()
    # when
    engine_plan = EnginePlan.from_dict(plan.to_engine_dict())
    # then
    assert engine_plan.test_cases[0].data_set.mode == mode
    assert len(engine_plan.test_cases[0].data_set.rows) == 25
