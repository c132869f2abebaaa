"""Factories of the tests (every app's): users through factory_boy and their logged-in clients,
job fields as plain valid data."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

PASSWORD = "correct-horse-battery-staple"
OMIT = object()  # an override that leaves the key out of a payload


class UserFactory(factory.django.DjangoModelFactory):
    """A user who can log in with PASSWORD."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password(PASSWORD)


def logged_in(user) -> Client:
    """A browser session logged in as `user`."""
    client = Client()
    client.force_login(user)
    return client


def api_client(user) -> APIClient:
    """An API client that authenticates as `user` with a DRF token (no session)."""
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def job_fields(**overrides) -> dict:
    """Fields of a valid job, as jobs.actions.create_job takes them (1 node × 1 g2 GPU)."""
    fields = {
        "name": "llama-finetune",
        "learning_type": "on_demand",
        "framework": "pytorch",
        "framework_version": "2.13.0",
        "failover_enabled": False,
        "server_type": "g2",
        "gpus_per_node": 1,
        "memory_gb": 256,
        "node_count": 1,
        "shm_size_gb": 64,
        "image_url": "registry.example.com:5000/team/trainer:1.0",
        "registry_username": "",
        "volume_mount_path": "",
        "script_url": "",
        "command": "torchrun train.py",
    }
    fields.update(overrides)
    return fields


def form_post(**overrides) -> dict:
    """A valid POST of the creation page; tags go in as `tag_key`/`tag_value` lists."""
    data = {
        "learning_type": "on_demand",
        "name": "llama-finetune",
        "framework": "pytorch",
        "framework_version": "2.13.0",
        "server_type": "g2",
        "gpus_per_node": "1",
        "node_count": "1",
        "shm_size_gb": "64",
        "image_url": "registry.example.com:5000/team/trainer:1.0",
        "registry_username": "",
        "registry_password": "",
        "volume_mount_path": "",
        "script_url": "",
        "command": "torchrun train.py",
        "tag_key": [],
        "tag_value": [],
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not OMIT}


def api_payload(**overrides) -> dict:
    """A valid JSON body for POST /api/v1/training-jobs/."""
    data = {
        "name": "llama-finetune",
        "learning_type": "on_demand",
        "framework": "pytorch",
        "framework_version": "2.13.0",
        "failover_enabled": False,
        "server_type": "g2",
        "gpus_per_node": 1,
        "memory_gb": 256,
        "node_count": 1,
        "shm_size_gb": 64,
        "image_url": "registry.example.com:5000/team/trainer:1.0",
        "command": "torchrun train.py",
        "tags": [],
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not OMIT}
