"""Shared test fixtures. GPU tests use the real wgpu adapter (lavapipe in CI); under CI=true a
missing adapter is a failure, never a skip."""

from __future__ import annotations

import os

import pytest


def _gpu_or_fail():
    from render.errors import AdapterError
    from render.gpu.device import get_context

    try:
        return get_context()
    except AdapterError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but no GPU adapter: {exc}")
        pytest.skip(f"no GPU adapter: {exc}")


@pytest.fixture(scope="session")
def gpu_ctx():
    return _gpu_or_fail()


@pytest.fixture(scope="session")
def gpu_engine(gpu_ctx):
    from render import Engine

    return Engine("gpu")


@pytest.fixture(scope="session")
def ref_engine():
    from render import Engine

    return Engine("reference")
