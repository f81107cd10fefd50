import pytest
from django.contrib.staticfiles import finders


@pytest.mark.django_db
def test_favicon_ico_is_not_a_404_and_pages_link_the_icon(client, alice):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response.url.endswith("img/favicon.svg")
    assert finders.find("img/favicon.svg")
    icon = client.get(response.url)
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content if icon.streaming else [icon.content])
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert 'rel="icon"' in page and "img/favicon.svg" in page
