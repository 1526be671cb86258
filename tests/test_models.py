"""Model and device resolution."""

from __future__ import annotations

import pytest


def test_devices_that_do_not_exist_are_one_line_errors() -> None:
    import torch

    from evolm.errors import ModelError
    from evolm.models import resolve_device

    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ModelError, match="unknown device 'bogus'"):
        resolve_device("bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="not available here"):
            resolve_device("cuda")
