"""The kernel cache imports code only from a folder that is ours and private."""
from __future__ import annotations

import os
import stat

import pytest

from sparsad.codegen.numba_backend import kernel_cache_dir
from sparsad.errors import UnsupportedError

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")


def test_a_new_cache_folder_is_created_private(tmp_path, monkeypatch):
    target = tmp_path / "cache" / "kernels"
    monkeypatch.setenv("SPARSAD_KERNEL_CACHE", str(target))
    assert kernel_cache_dir() == target
    assert stat.S_IMODE(target.stat().st_mode) & 0o077 == 0


def test_a_folder_others_can_write_is_never_used(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SPARSAD_KERNEL_CACHE", str(shared))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the fallbacks: a fresh private home
    chosen = kernel_cache_dir()
    assert chosen != shared
    assert stat.S_IMODE(chosen.stat().st_mode) & 0o022 == 0


def test_no_private_folder_is_an_error_naming_the_fix(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SPARSAD_KERNEL_CACHE", str(shared))
    monkeypatch.setenv("HOME", str(shared))
    home_cache = shared / ".cache" / "sparsad" / "kernels"
    home_cache.mkdir(parents=True)
    home_cache.chmod(0o777)
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(shared))
    user_tmp = shared / f"sparsad-kernels-{os.getuid()}"
    user_tmp.mkdir()
    user_tmp.chmod(0o777)
    with pytest.raises(UnsupportedError, match="writable by others.*chmod 700"):
        kernel_cache_dir()
