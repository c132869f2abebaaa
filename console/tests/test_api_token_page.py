"""/account/token/: a user makes, rotates and revokes their own API token; the key is shown once."""

from __future__ import annotations

from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

PAGE = "/account/token/"


def api_status(key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/training-jobs/").status_code


def test_an_anonymous_visitor_is_sent_to_the_login_form(client, db):
    for response in (client.get(PAGE), client.post(PAGE, {"action": "create"})):
        assert response.status_code == 302 and response.url.startswith("/login/")
    assert not Token.objects.exists()


def test_a_user_without_a_token_creates_one_and_sees_it_once(alice, alice_client):
    assert "You have no API token." in alice_client.get(PAGE).content.decode()

    response = alice_client.post(PAGE, {"action": "create"})

    key = Token.objects.get(user=alice).key
    page = response.content.decode()
    assert response.status_code == 200 and key in page
    assert "not shown again" in page and "simpleai login http://testserver" in page
    assert "no-store" in response["Cache-Control"]
    assert api_status(key) == 200
    later = alice_client.get(PAGE).content.decode()
    assert key not in later and "You have a token, created" in later


def test_rotating_needs_the_confirmation_and_then_the_old_token_stops_working(alice, alice_client):
    old = Token.objects.create(user=alice).key

    refused = alice_client.post(PAGE, {"action": "rotate"})
    assert refused.status_code == 400 and "Tick the box to confirm" in refused.content.decode()
    assert Token.objects.get(user=alice).key == old

    response = alice_client.post(PAGE, {"action": "rotate", "confirm": "on"})

    new = Token.objects.get(user=alice).key
    assert new != old and new in response.content.decode()
    assert api_status(old) == 401 and api_status(new) == 200


def test_revoking_leaves_no_token(alice, alice_client):
    key = Token.objects.create(user=alice).key
    response = alice_client.post(PAGE, {"action": "revoke"})
    assert "was revoked" in response.content.decode()
    assert not Token.objects.filter(user=alice).exists()
    assert api_status(key) == 401


def test_each_user_sees_and_rotates_only_their_own(alice, bob, alice_client, bob_client):
    alice_key = Token.objects.create(user=alice).key
    bob_page = bob_client.post(PAGE, {"action": "create"}).content.decode()
    assert alice_key not in bob_page
    assert Token.objects.get(user=alice).key == alice_key
    assert Token.objects.filter(user=bob).exists()
